"""Sweep orchestration on Ray Tune: spec, launch, resume, status, report."""
