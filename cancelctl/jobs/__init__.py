"""The job side: what runs inside a job, from the scheduler's command line to the backend's result.

    entry        the process entry `python -m cancelctl.jobs slurm FOLDER TOKEN | local FOLDER`
                 (the module name is in every rendered sbatch script, hence `jobs`, not `job`)
    zygote       the local executor's preloaded worker: lab runs' processes forked after the imports
    runjob       `RunJob`, the callable submitit runs: one attempt of a run, from its folder,
                 through its backend's `train` (`cancelctl.backends.protocol`), into tracking
    outcome      what an attempt leaves in its run folder (result, error, attempts) and reading it back
    preemption   USR2/SIGTERM deferred to the backend's step boundary, where it checkpoints
    monitor      the spec's alert rules, evaluated after every step; a `stop` ends the run
    allocation   the nodes of a multi-node SLURM allocation: ports, temp dirs, `ray start` lines
    raycluster   the allocation's Ray cluster: start, join, watch, tear down

The job side never imports the CLI or the report (tests/test_flow.py). Importing this package
imports none of its modules.
"""
