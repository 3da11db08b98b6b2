"""The production agent harness, used alike by SFT data generation, RL rollouts, eval and `agent`.

One episode, top to bottom:
    ws = sandbox.create_workspace(task_snapshot, dest)          # cheap: hardlinks, copy-on-write by rename
    ctx = tools.ToolContext(ws, sandbox.Sandbox(ws), ask_user=task.user)
    traj = episode.run_episode(policy, prompt, tools.select(names), ctx, checker=task.check)
    sandbox.remove_workspace(ws)

protocol.py parses and classifies assistant turns; tools/ holds the tools; the harness never imports
torch and knows nothing of RL (rewards fill `Trajectory.reward_components` later).
"""
