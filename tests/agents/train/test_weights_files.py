"""check_weights against the loader it stands in front of: whatever safetensors' own loader
(``load_file``, what ``from_pretrained`` calls) would fail on is a ValueError naming the file
before a model is built, and what it reads passes. Files built by hand, the loader asked."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from flowzoo.agents.runs import weights


def _file(path, tensors: dict, data: int) -> None:
    """A safetensors file from a header of (dtype, shape, offsets) and ``data`` zero bytes."""
    h = json.dumps(
        {k: {"dtype": d, "shape": sh, "data_offsets": off} for k, (d, sh, off) in tensors.items()}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(data))


def _loader_says(path) -> bool:
    try:
        load_file(str(path))
        return True
    except Exception:  # noqa: BLE001 - any refusal
        return False


CASES = {
    # a dtype the header parser knows and torch does not: passed, then the loader failed
    "F6 values": ({"w": ("F6_E2M3", [4, 4], [0, 12])}, 12, False),
    "F6 values, other kind": ({"w": ("F6_E3M2", [4, 4], [0, 12])}, 12, False),
    # packed four-bit values: slicing refused these, the loader reads them
    "F4 pairs": ({"w": ("F4", [2], [0, 1])}, 1, True),
    "F4 matrix": ({"w": ("F4", [3, 2], [0, 3])}, 3, True),
    "F4 large": ({"w": ("F4", [256, 1024], [0, 131072])}, 131072, True),
    # an odd last dimension of packed values, empty: passed, the loader refuses
    "F4 empty, odd": ({"w": ("F4", [0, 3], [0, 0])}, 0, False),
    "F4 large, odd": ({"w": ("F4", [262144, 1], [0, 131072])}, 131072, False),
    # a bad tensor behind a good one of its dtype: one tensor per dtype was tried
    "behind a good one": (
        {"a": ("F32", [1], [0, 4]), "b": ("F32", [0, 2**63], [4, 4])},
        4,
        False,
    ),
    "scalars and bytes": (
        {"s": ("F32", [], [0, 4]), "e": ("F8_E8M0", [12], [4, 16]), "z": ("BOOL", [0], [16, 16])},
        16,
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_weights_agrees_with_the_loader(tmp_path, case):
    tensors, data, loads = CASES[case]
    f = tmp_path / "model.safetensors"
    _file(f, tensors, data)
    assert _loader_says(f) is loads  # the premise: what the loader does with it
    if loads:
        weights.check_weights(tmp_path)
    else:
        with pytest.raises(ValueError, match="model.safetensors holds a tensor"):
            weights.check_weights(tmp_path)


@pytest.mark.parametrize("where", ["linked folder", "ten folders down", "any name"])
def test_a_shard_the_index_names_is_checked_wherever_it_lies(tmp_path, where):
    """The loader opens the shards an index names, through links, at any depth, under any
    name; the walk for ``*.safetensors`` saw none of them (red team)."""
    model = tmp_path / "model"
    model.mkdir()
    name = {
        "linked folder": "shards/part-1.safetensors",
        "ten folders down": "/".join(["s"] * 10) + "/part-1.safetensors",
        "any name": "part-1.bin2",
    }[where]
    if where == "linked folder":
        (tmp_path / "elsewhere").mkdir()
        os.symlink(tmp_path / "elsewhere", model / "shards")
    shard = model / name
    shard.parent.mkdir(parents=True, exist_ok=True)
    save_file({"w": torch.zeros(4, 4)}, str(shard))
    index = {"metadata": {}, "weight_map": {"w": name}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    weights.check_weights(model)  # whole: passes
    assert str(shard) in {str(p) for p in weights.weight_files(model)}
    shard.write_bytes(shard.read_bytes()[:-8])  # truncated
    assert not _loader_says(shard)
    with pytest.raises(ValueError, match="part-1.* is truncated or corrupt"):
        weights.check_weights(model)
    (model / "model.safetensors.index.json").write_text('{"weight_map": [1]}')
    with pytest.raises(ValueError, match="index.json is not a weights index"):
        weights.check_weights(model)


def test_red_team_round_5_scalars_dotted_roots_and_names_that_are_no_file(tmp_path):
    """A scalar met after the exact-read budget went to the probe (IndexError); a model
    folder named through `..` dropped every shard from the index; shard names the system
    cannot open as files ('', '.', 'a.bin/') were tidied into ones it can."""
    f = tmp_path / "model.safetensors"
    big = {f"a{i}": ("F32", [16384], [65536 * i, 65536 * (i + 1)]) for i in range(1025)}
    _file(f, {**big, "z": ("F32", [], [65536 * 1025, 65536 * 1025 + 4])}, 65536 * 1025 + 4)
    assert _loader_says(f)
    weights.check_weights(tmp_path)
    f.unlink()
    model = tmp_path / "m"
    model.mkdir()
    save_file({"w": torch.zeros(2)}, str(model / "part.bin"))
    (model / "part.bin").write_bytes((model / "part.bin").read_bytes()[:-4])  # truncated
    (model / "model.safetensors.index.json").write_text('{"weight_map": {"w": "part.bin"}}')
    dotted = tmp_path / "m" / ".." / "m"
    with pytest.raises(ValueError, match="part.bin is truncated or corrupt"):
        weights.check_weights(dotted)
    assert weights.weights_identity(dotted)["sizes"]  # named from the folder as given
    for name in ("", ".", "part.bin/"):
        index = {"weight_map": {"w": name}}
        (model / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ValueError, match="names no file"):
            weights.check_weights(model)
