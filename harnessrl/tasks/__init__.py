"""Task suites, their checkers, and the scripted expert.

    suites.build_suite("bugfix", "suites/bugfix", seed=0, num=40)   # tasks/{train,heldout}.jsonl + repos/
    tasks = task.load_suite("suites/bugfix", "train")
    traj = harness.episode.run_task(tasks[0], "suites/bugfix", policy, budgets)   # sandboxed, checked
    traj.outcome.success

Suites (one module each): lookup (where is X defined / what is its value), edit (rename, change a
constant, add a parameter), bugfix (a planted one-token bug and a test that catches it; from generated
repos or any Python directory), long_horizon (several values, one search each, more than the context holds), swe (SWE-bench-format
rows imported from local clones, `tasks import`; diffs.py replays their patches). repogen.py makes
the generated repos; probe.py and mutations.py make tests and bugs; checkers.py decides success;
expert.py is the scripted policy whose trajectories are the SFT data.

This file imports nothing: the harness's episode imports the task model and its checker, and the
expert imports the episode, so the package's names are imported from their modules.
"""
