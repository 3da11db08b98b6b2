"""The production agent harness, used alike by SFT data generation, RL rollouts, eval and `agent`.

One episode of a task, top to bottom (episode.run_task does this):
    ws = sandbox.create_workspace(task_snapshot, dest)          # cheap: hardlinks, copy-on-write by rename
    ctx = tools.ToolContext(ws, sandbox.Sandbox(ws), ask_user=task.user)
    traj = episode.run_episode(policy, prompt, tools.select(names), ctx, checker=make_checker(task))
    sandbox.remove_workspace(ws)

protocol.py parses and classifies assistant turns; tools/ holds the tools; context.py compacts a full
context. The harness never imports torch and knows nothing of RL (the RL loop's scoring fills
`Trajectory.reward_components`).
"""
