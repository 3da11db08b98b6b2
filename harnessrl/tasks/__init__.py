"""Task suites, their checkers, and the scripted expert.

    build_suite("bugfix", "suites/bugfix", seed=0, num=40)      # tasks/{train,heldout}.jsonl + repos/
    tasks = load_suite("suites/bugfix", "train")
    traj = run_task(tasks[0], "suites/bugfix", policy)            # sandboxed episode, checked
    traj.outcome.success

Suites (one module each): lookup (where is X defined / what is its value), edit (rename, change a
constant, add a parameter), bugfix (a planted one-token bug and a test that catches it; from generated
repos or any Python directory), long_horizon (several values, one search each, more than the context holds). repogen.py makes
the generated repos; probe.py and mutations.py make tests and bugs; checkers.py decides success;
expert.py is the scripted policy whose trajectories are the SFT data.
"""

from harnessrl.tasks.checkers import make_checker
from harnessrl.tasks.expert import Expert, expert_trajectories, success_rates
from harnessrl.tasks.run import prompt_messages, run_task, run_tasks
from harnessrl.tasks.suites import SUITES, build_suite
from harnessrl.tasks.task import Task, TaskFileError, load_suite, load_tasks

__all__ = [
    "SUITES",
    "Expert",
    "Task",
    "TaskFileError",
    "build_suite",
    "expert_trajectories",
    "load_suite",
    "load_tasks",
    "make_checker",
    "prompt_messages",
    "run_task",
    "run_tasks",
    "success_rates",
]
