"""Mentis inside coding-agent harnesses: config installs, hooks, git code context."""
