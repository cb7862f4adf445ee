"""Validation errors in the user's language (issue 16: "unknown field" rather than pydantic's wording)."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from notification_controller.api.messages import describe_error


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int
    mode: Literal["Always", "StateChange"] = "Always"
    name: str = Field("", pattern="^[a-z]+$", max_length=5)
    items: list[int] = Field(default_factory=list, max_length=2)
    ratio: float = Field(0.5, ge=0, le=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"count": 1, "typo": 2}, "unknown field"),
        ({}, "required field is missing"),
        ({"count": "many"}, "must be an integer"),
        ({"count": 1.5}, "must be an integer"),
        ({"count": 1, "mode": "Sometimes"}, "must be one of 'Always' or 'StateChange'"),
        ({"count": 1, "name": "ABC"}, "does not match the pattern ^[a-z]+$"),
        ({"count": 1, "name": "abcdefg"}, "must have at most 5 characters"),
        ({"count": 1, "items": [1, 2, 3]}, "must have at most 2 items"),
        ({"count": 1, "ratio": 2}, "must be at most 1.0"),
        ({"count": 1, "items": "x"}, "must be a list"),
    ],
)
def test_pydantic_errors_read_like_the_api_server(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError) as info:
        Sample.model_validate(raw)
    assert describe_error(info.value.errors()[0]) == expected


def test_no_input_value_is_echoed() -> None:
    """A value may be a secret someone pasted in the wrong field: the phrase never contains it."""
    with pytest.raises(ValidationError) as info:
        Sample.model_validate({"count": "s3cr3t-t0ken"})
    assert "s3cr3t" not in describe_error(info.value.errors()[0])
