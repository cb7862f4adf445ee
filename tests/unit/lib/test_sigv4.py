"""``lib.sigv4``: AWS Signature Version 4, checked against AWS's published test suite and against botocore.

The vectors are the aws-sig-v4-test-suite's (as botocore carries it in ``tests/unit/auth/aws4_testsuite``):
for each request (``.req``, as the suite writes it), the canonical request (``.creq``), the digest that ends
the string to sign (``.sts``) and the signature of the Authorization header (``.authz``), with the suite's
example key pair, region ``us-east-1``, service ``service`` and time 2015-08-30T12:36:00Z. The suite's
session-token cases sign ``X-Amz-Security-Token`` (``get-vanilla-with-session-token``,
``post-sts-header-before``), which is what botocore and we do.

The second half signs the requests the ``sns`` and ``sqs`` providers send (and random ones) with botocore's
``SigV4Auth`` as well: the two must agree byte for byte, so a change in botocore's signing (the library the
AWS CLI and moto's signature check use) fails here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials as BotoCredentials  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.lib import sigv4
from notification_controller.lib.sigv4 import Credentials, sign

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
WHEN = datetime(2015, 8, 30, 12, 36, 0, tzinfo=UTC)
SCOPE = "20150830/us-east-1/service/aws4_request"


class Vector:
    def __init__(self, name: str, request: str, creq: str, sts_digest: str, signature: str) -> None:
        self.name, self.creq, self.sts_digest, self.signature = name, creq, sts_digest, signature
        head, _, self.body = request.partition("\n\n")
        lines = head.split("\n")
        # a target with a space (get-space) is "GET /example space/ HTTP/1.1": the version is the last word
        self.method, rest = lines[0].split(" ", 1)
        self.target = rest.rsplit(" ", 1)[0]
        self.headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                continue
            if line[:1] in (" ", "\t") and self.headers:  # a folded line continues the previous value
                name, value = self.headers[-1]
                self.headers[-1] = (name, f"{value}\n{line}")
                continue
            name, _, value = line.partition(":")
            self.headers.append((name, value))

    @property
    def session_token(self) -> str:
        for line in self.creq.split("\n"):
            if line.startswith("x-amz-security-token:"):
                return line.split(":", 1)[1]
        return ""

    def signed(self) -> sigv4.Signed:
        credentials = Credentials(ACCESS_KEY, SECRET_KEY, self.session_token)
        return sign(
            self.method,
            "https://example.amazonaws.com" + self.target,
            self.headers,
            self.body.encode(),
            credentials=credentials,
            region="us-east-1",
            service="service",
            now=WHEN,
        )


VECTORS = [
    Vector(
        "get-vanilla",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "get-vanilla-query",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "get-vanilla-query-order-key-case",
        "GET /?Param2=value2&Param1=value1 HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
    ),
    Vector(
        "get-vanilla-query-order-value",
        "GET /?Param1=value2&Param1=value1 HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\nParam1=value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "c968629d70850097a2d8781c9bf7edcb988b04cac14cca9be4acc3595f884606",
        "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694",
    ),
    Vector(
        "get-vanilla-query-order-encoded",
        "GET /?Param-3=Value3&Param=Value2&%E1%88%B4=Value1 HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z\n",
        "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
        "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
    ),
    Vector(
        "get-vanilla-query-unreserved",
        "GET /?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
        "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
    ),
    Vector(
        "get-vanilla-utf8-query",
        "GET /?ሴ=bar HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
    ),
    Vector(
        "get-vanilla-empty-query-key",
        "GET /?Param1=value1 HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
        "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb",
    ),
    Vector(
        "get-unreserved",
        "GET /-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
        "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
    ),
    Vector(
        "get-utf8",
        "GET /ሴ HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
    ),
    Vector(
        "get-header-key-duplicate",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1:value2\nMy-Header1:value2\nMy-Header1:value1\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
        "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
    ),
    Vector(
        "get-header-value-multiline",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1:value1\n  value2\n     value3\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1 value2 value3\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "e99419459a677bc11de234014be3c4e72c1ea5b454ceb58b613061f5d7a162e8",
        "cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd",
    ),
    Vector(
        "get-header-value-order",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1:value4\nMy-Header1:value1\nMy-Header1:value3\nMy-Header1:value2\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
        "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
    ),
    Vector(
        "get-header-value-trim",
        'GET / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1: value1\nMy-Header2: "a   b   c"\nX-Amz-Date:20150830T123600Z',
        'GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:"a b c"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
        "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
        "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
    ),
    Vector(
        "post-vanilla",
        "POST / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
    ),
    Vector(
        "post-vanilla-query",
        "POST /?Param1=value1 HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
        "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
    ),
    Vector(
        "post-header-key-case",
        "POST / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
    ),
    Vector(
        "post-header-key-sort",
        "POST / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1:value1\nX-Amz-Date:20150830T123600Z",
        "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
        "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
    ),
    Vector(
        "post-header-value-case",
        "POST / HTTP/1.1\nHost:example.amazonaws.com\nMy-Header1:VALUE1\nX-Amz-Date:20150830T123600Z",
        "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:VALUE1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
        "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d",
    ),
    Vector(
        "post-x-www-form-urlencoded",
        "POST / HTTP/1.1\nContent-Type:application/x-www-form-urlencoded\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z\n\nParam1=value1",
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
        "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
    ),
    Vector(
        "post-x-www-form-urlencoded-parameters",
        "POST / HTTP/1.1\nContent-Type:application/x-www-form-urlencoded; charset=utf8\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z\n\nParam1=value1",
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded; charset=utf8\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
        "2e1cf7ed91881a30569e46552437e4156c823447bf1781b921b5d486c568dd1c",
        "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe",
    ),
    Vector(
        "get-vanilla-with-session-token",
        "GET / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n\nhost;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
        "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
    ),
    Vector(
        "post-sts-token/post-sts-header-before",
        "POST / HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z\nX-Amz-Security-Token:AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==",
        "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==\n\nhost;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
        "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
    ),
    Vector(
        "normalize-path/get-relative",
        "GET /example/.. HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "normalize-path/get-relative-relative",
        "GET /example1/example2/../.. HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "normalize-path/get-slash",
        "GET // HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "normalize-path/get-slash-dot-slash",
        "GET /./ HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    ),
    Vector(
        "normalize-path/get-slash-pointless-dot",
        "GET /./example HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/example\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702",
        "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5",
    ),
    Vector(
        "normalize-path/get-slashes",
        "GET //example// HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/example/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
        "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
    ),
    Vector(
        "normalize-path/get-space",
        "GET /example space/ HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z",
        "GET\n/example%20space/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
        "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
    ),
    Vector(
        "normalize-path/get-special-character",
        "GET /example/$delete HTTP/1.1\nHost:example.amazonaws.com\nX-Amz-Date:20150830T123600Z\n",
        "GET\n/example/%24delete\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "4053e45b5cef7cec5e17f736b1c12b3faf0388fd4c0bd24326386f132039ce5c",
        "a853c9b21b528b19643d00910d35b83a10c366a10833ceefb45edd6c80e40f27",
    ),
]


@pytest.mark.parametrize("vector", VECTORS, ids=[v.name for v in VECTORS])
def test_aws_test_suite(vector: Vector) -> None:
    signed = vector.signed()
    assert signed.canonical_request == vector.creq
    assert signed.string_to_sign == f"AWS4-HMAC-SHA256\n20150830T123600Z\n{SCOPE}\n{vector.sts_digest}"
    assert signed.signature == vector.signature
    names = vector.creq.split("\n")[-2]
    assert signed.authorization == (
        f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{SCOPE}, SignedHeaders={names}, Signature={vector.signature}"
    )


def test_the_suite_was_read() -> None:
    """The parser of the suite's request format kept what matters (a broken parser would fail every case,
    but say so plainly)."""
    by_name = {v.name: v for v in VECTORS}
    assert by_name["get-header-key-duplicate"].headers.count(("My-Header1", "value2")) == 2
    assert by_name["post-x-www-form-urlencoded"].body == "Param1=value1"
    assert by_name["normalize-path/get-space"].target == "/example space/"
    assert by_name["get-vanilla-with-session-token"].session_token.startswith("6e86291e")


def test_date_and_token_headers_are_added_and_replaced() -> None:
    creds = Credentials("AKID", "s3cr3t-value", "token-1")
    signed = sign(
        "POST",
        "https://sns.eu-west-1.amazonaws.com/",
        {"X-Amz-Date": "19700101T000000Z", "X-Amz-Security-Token": "old", "Authorization": "old"},
        b"",
        credentials=creds,
        region="eu-west-1",
        service="sns",
        now=datetime(2026, 3, 1, 11, 20, 30, tzinfo=timezone(timedelta(hours=1))),
    )
    assert signed.headers["X-Amz-Date"] == "20260301T102030Z"  # UTC, whatever the zone given
    assert signed.headers["X-Amz-Security-Token"] == "token-1"
    assert "host;x-amz-date;x-amz-security-token" in signed.authorization
    assert "s3cr3t-value" not in repr(creds) and "token-1" not in repr(creds)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://SQS.us-east-1.amazonaws.com/1/q", "sqs.us-east-1.amazonaws.com"),
        ("https://sqs.us-east-1.amazonaws.com:443/", "sqs.us-east-1.amazonaws.com"),
        ("http://127.0.0.1:8080/", "127.0.0.1:8080"),
        ("http://127.0.0.1:80/", "127.0.0.1"),
        ("http://[::1]:9000/", "[::1]:9000"),
    ],
)
def test_host_header_is_what_the_client_writes(url: str, host: str) -> None:
    assert sigv4.host_header(url) == host


# ---- botocore, the second opinion ------------------------------------------------------------------


def botocore_authorization(
    method: str, url: str, headers: dict[str, str], body: bytes, creds: Credentials, region: str, service: str
) -> str:
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    request.context["timestamp"] = sigv4.amz_date(WHEN)
    auth = SigV4Auth(
        BotoCredentials(creds.access_key_id, creds.secret_access_key, creds.session_token or None),
        service,
        region,
    )
    # add_auth reads the clock: the steps it runs, at our time
    auth._modify_request_before_signing(request)
    canonical = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical), request)
    auth._inject_signature_to_request(request, signature)
    return str(request.headers["Authorization"])


PROVIDER_REQUESTS = [
    (
        "POST",
        "https://sns.eu-central-1.amazonaws.com/",
        {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        b"Action=Publish&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aeu-central-1%3A123456789012%3Aflux&Message=%7B%7D",
        "eu-central-1",
        "sns",
    ),
    (
        "POST",
        "https://sqs.us-west-2.amazonaws.com/",
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"},
        b'{"QueueUrl":"https://sqs.us-west-2.amazonaws.com/123456789012/q.fifo","MessageBody":"{}"}',
        "us-west-2",
        "sqs",
    ),
    (
        "POST",
        "http://127.0.0.1:5000/",
        {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"},
        b'{"QueueUrl":"http://127.0.0.1:5000/123456789012/q","MessageBody":"\\u00e9t\\u00e9"}',
        "us-east-1",
        "sqs",
    ),
]


@pytest.mark.parametrize("token", ["", "FQoGZXIvYXdzEXAMPLE//session+token=="])
@pytest.mark.parametrize(("method", "url", "headers", "body", "region", "service"), PROVIDER_REQUESTS)
def test_provider_requests_sign_as_botocore_signs_them(
    method: str, url: str, headers: dict[str, str], body: bytes, region: str, service: str, token: str
) -> None:
    creds = Credentials("AKIAIOSFODNN7EXAMPLE", SECRET_KEY, token)
    ours = sign(method, url, headers, body, credentials=creds, region=region, service=service, now=WHEN)
    assert ours.authorization == botocore_authorization(method, url, headers, body, creds, region, service)


_segment = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="/?#%"), max_size=8
)
_query_word = st.text(alphabet="abcXYZ019-_.~", min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    segments=st.lists(_segment, max_size=4),
    query=st.lists(st.tuples(_query_word, _query_word), max_size=4),
    header_values=st.lists(st.text(alphabet="abc  XYZ,;=/", max_size=12), max_size=3),
    body=st.binary(max_size=64),
    port=st.sampled_from(["", ":443", ":8443"]),
)
def test_random_requests_sign_as_botocore_signs_them(
    segments: list[str], query: list[tuple[str, str]], header_values: list[str], body: bytes, port: str
) -> None:
    from urllib.parse import quote

    path = "/" + "/".join(quote(s, safe="") for s in segments)
    qs = "&".join(f"{k}={v}" for k, v in query)
    url = f"https://sqs.eu-west-3.amazonaws.com{port}{path}" + (f"?{qs}" if qs else "")
    headers = {f"X-Test-{i}": v for i, v in enumerate(header_values)}
    creds = Credentials("AKIAIOSFODNN7EXAMPLE", SECRET_KEY)
    ours = sign("POST", url, headers, body, credentials=creds, region="eu-west-3", service="sqs", now=WHEN)
    assert ours.authorization == botocore_authorization("POST", url, headers, body, creds, "eu-west-3", "sqs")
