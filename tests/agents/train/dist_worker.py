"""Run by tests/agents/train/test_distributed.py under ``torch.distributed.run`` (2 processes, gloo):
each process updates its share of pickled records; process 0 writes what the update made
(under FSDP the full weights are gathered first, a collective every process joins)."""

import pickle
import sys

import torch

from flowzoo.agents.models.sharding import full_state_dict
from flowzoo.agents.train.trainer import Trainer


def main(cfg_path: str, records_path: str, out_path: str) -> None:
    cfg = pickle.load(open(cfg_path, "rb"))
    records = pickle.load(open(records_path, "rb"))
    tr = Trainer(cfg, progress=False)
    rank, world = tr.dist.rank, tr.dist.world
    problems = list(dict.fromkeys(r.group for r in records))
    mine = {p for k, p in enumerate(problems) if k % world == rank}
    local = [r for r in records if r.group in mine]
    for i, r in enumerate(local):  # episode indices are local to the list update() sees
        r.index = i
        for t in r.turns:
            t.episode = i
    per_policy, _ = tr.update(local)
    model = tr.router.policies["shared"].model
    if cfg.fsdp:
        state = full_state_dict(model)
    else:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if rank == 0:
        out = {"per_policy": per_policy, "state": state}
        if not cfg.fsdp:  # under FSDP each process holds a shard of these
            g = tr.last_role_grads["shared"]
            out.update(roles=g["roles"], total=g["total"])
        torch.save(out, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
