"""The project's own arithmetic word problems: seeded, exact integer answers, of a chosen difficulty.

Why our own: a test or a demo needs questions with known answers and no download, and a
135M-parameter model needs a spread of difficulty (it gets one-step problems right and loses
the thread over several), so a ladder shows answers lost between rungs. Each problem is a
story of one quantity changed step by step; its ``answer`` field is written GSM8K's way, the
worked steps then ``#### N``, so the same grader reads both sets.

Difficulty has two dials, the number of steps (``max_steps``: problem ``i`` has ``1 + i % max_steps``)
and the size of the numbers (``max_number``: the starting count is at most that, each amount added or
taken at most half of it): a set a model mostly answers right is what lets a ladder's losses stand
out of the noise, and small models need small numbers and few steps for that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.rundir.quality import Question

NAMES = ("Ava", "Ben", "Chloe", "Dev", "Ema", "Finn", "Gia", "Hugo", "Ines", "Jon", "Kira", "Leo", "Maya", "Nils")
THINGS = ("apples", "marbles", "stickers", "books", "cookies", "pencils", "shells", "coins", "cards", "stamps")
MAX_STEPS = 4
MAX_NUMBER = 20
MAX_NUMBER_RANGE = (4, 10_000)  # 4: the one-step form needs an amount below half of it


@dataclass(frozen=True)
class Step:
    operator: str  # one of + - * /
    operand: int
    sentence: str


def _step(rng: random.Random, value: int, name: str, things: str, max_number: int) -> tuple[Step, int]:
    """One change to the quantity: amounts up to half of ``max_number``, doubling and halving only, so
    that a small model gets short problems right and loses the thread over longer ones."""
    amount = max_number // 2
    while True:
        operator = rng.choice(("+", "+", "-", "-", "*", "/"))
        if operator == "+":
            operand = rng.randint(1, amount)
            verb = rng.choice(("buys", "finds", "is given", "wins"))
            return Step("+", operand, f"Then {name} {verb} {operand} more {things}."), value + operand
        if operator == "-" and value > 2:
            operand = rng.randint(1, min(value - 1, amount))
            verb = rng.choice(("gives away", "loses", "sells", "uses"))
            return Step("-", operand, f"Then {name} {verb} {operand} {things}."), value - operand
        if operator == "*" and value <= max_number * 5 // 2:
            return Step("*", 2, f"Then {name} ends up with twice as many {things}."), value * 2
        if operator == "/" and value % 2 == 0:
            return Step("/", 2, f"Then {name} gives away half of the {things}."), value // 2


def apply(operator: str, left: int, right: int) -> int:
    if operator == "+":
        return left + right
    if operator == "-":
        return left - right
    if operator == "*":
        return left * right
    if operator == "/":
        return left // right
    raise ValueError(f"unknown operator {operator!r}")


def word_problem(rng: random.Random, index: int, steps: int, label: str, max_number: int = MAX_NUMBER) -> Question:
    name = rng.choice(NAMES)
    things = rng.choice(THINGS)
    value = rng.randint(2, max_number)
    sentences = [f"{name} has {value} {things}."]
    worked = []
    if steps == 1:  # the easiest form: one sentence, one addition or subtraction
        operand = rng.randint(1, min(value - 1, max_number // 2 - 1))
        if rng.random() < 0.5:
            sentences = [f"{name} has {value} {things} and buys {operand} more."]
            worked, value = [f"{value} + {operand} = {value + operand}"], value + operand
        else:
            sentences = [f"{name} has {value} {things} and gives {operand} away."]
            worked, value = [f"{value} - {operand} = {value - operand}"], value - operand
        steps = 0
    for _ in range(steps):
        step, result = _step(rng, value, name, things, max_number)
        sentences.append(step.sentence)
        worked.append(f"{value} {step.operator} {step.operand} = {result}")
        value = result
    sentences.append(f"How many {things} does {name} have now?")
    return Question(
        id=f"{label}-{index:04d}", question=" ".join(sentences), answer="\n".join(worked) + f"\n#### {value}"
    )


def generate_questions(count: int, seed: int = 0, max_steps: int = MAX_STEPS,
                       max_number: int = MAX_NUMBER) -> list[Question]:
    """``count`` problems; problem ``i`` has ``1 + i % max_steps`` steps, so every size is equally common.
    The defaults give the same problems for a seed as before ``max_number`` was a dial."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if not 1 <= max_steps <= 12:
        raise ValueError("max_steps must be from 1 to 12")
    low, high = MAX_NUMBER_RANGE
    if not low <= max_number <= high:
        raise ValueError(f"max_number must be from {low} to {high}")
    rng = random.Random(seed)
    return [word_problem(rng, index, 1 + index % max_steps, f"gen{seed}", max_number) for index in range(count)]
