"""``lib.gojson``: Go's ``encoding/json`` bytes (sorted maps, struct order, escapes; reference §9)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from notification_controller.lib.gojson import GoStruct, dumps


def test_go_json_sorts_maps_but_keeps_struct_order() -> None:
    assert dumps(GoStruct(b=1, a={"z": 1, "y": 2})) == b'{"b":1,"a":{"y":2,"z":1}}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_fast_go_json_equals_the_reference_encoder(value: object) -> None:
    """orjson + byte escapes produce exactly the bytes of the straightforward encoder (§9)."""
    from notification_controller.lib.gojson import _dumps_stdlib, _sort_maps

    assert dumps(value) == _dumps_stdlib(_sort_maps(value))
