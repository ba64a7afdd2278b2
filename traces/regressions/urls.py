"""Regression set pages (filled in below)."""

urlpatterns: list = []
REQUIRED: dict = {}
