"""Passes, one per module, each ``IRModule -> IRModule``; `pipeline` composes them."""

from rvm.transform.pipeline import default_passes, run_pipeline

__all__ = ["default_passes", "run_pipeline"]
