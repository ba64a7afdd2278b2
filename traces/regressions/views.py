"""Regression set pages."""
