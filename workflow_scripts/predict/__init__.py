"""Predicted scaling past the largest machine measured: the all-reduce cost model and its checks."""
