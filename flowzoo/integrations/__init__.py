"""flowzoo's workflows inside other engines: TRL's GRPOTrainer (:mod:`.trl_adapter`),
verifiers (:mod:`.verifiers_env`), SkyRL-gym (:mod:`.skyrl_env`), TextArena
(:mod:`.textarena_env`) and an rLLM / verl-style workflow runner (:mod:`.rllm`). Each imports
its engine's package only when used."""
