"""The ``policy`` choice as a typed value (:class:`flowzoo.config.sharing.Sharing`)."""

import pytest

from flowzoo.config import TrainConfig


def test_policy_is_read_once_into_a_typed_sharing_value():
    """Every reader asks ``cfg.sharing`` (a :class:`Sharing`), none parses the text; the
    three forms map roles as documented and a bad one is refused when the config is made."""
    from flowzoo.config.sharing import Sharing

    roles = ["solver", "aggregator"]
    shared = TrainConfig(env="voting-math", policy="shared").sharing
    assert shared == Sharing("shared") and shared.role_map(roles) == dict.fromkeys(roles, "shared")
    iso = TrainConfig(env="voting-math", policy="isolated").sharing
    assert iso.role_map(roles) == {"solver": "solver", "aggregator": "aggregator"}
    text = "solver=a, aggregator=b"
    mapped = TrainConfig(env="voting-math", policy=text).sharing
    assert mapped.kind == "map" and mapped.role_map(roles) == {"solver": "a", "aggregator": "b"}
    assert Sharing.parse(str(mapped)) == mapped == Sharing.parse({"solver": "a", "aggregator": "b"})
    assert TrainConfig(env="voting-math", policy=text).sharing is mapped  # parsed once per text
    with pytest.raises(ValueError, match="misses roles"):
        TrainConfig(env="voting-math", policy="solver=a")
    with pytest.raises(ValueError, match="unknown roles"):
        TrainConfig(env="voting-math", policy="solver=a,aggregator=b,judge=c")
    with pytest.raises(ValueError, match="unknown policy sharing 'isolate'"):
        TrainConfig(env="voting-math", policy="isolate")
