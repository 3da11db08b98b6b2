"""harnessrl: train tool-calling coding agents with RL in the production harness."""

__version__ = "0.1.0"
