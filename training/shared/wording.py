"""Counts as a person reads them: `1 holder`, `3 trainers`, not `1 holders`; one place for the controller's notes."""

from __future__ import annotations


def count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")
