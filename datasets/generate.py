#!/usr/bin/env python3
"""Generate the project's own synthetic calibration corpora (children's stories, Python source,
a small mixed JSONL) and their manifest, deterministically from a seed; --check verifies them.

Usage:
    python3 datasets/generate.py            # write the files next to this script
    python3 datasets/generate.py --check    # regenerate in memory, compare sha256, exit 1 on change

Only the Python standard library is used. All randomness comes from a small splitmix64 generator
seeded explicitly, so the output is the same on every platform and Python version.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import re
import string
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from typing import Callable

DEFAULT_SEED = 2605
STORIES_NAME = "oscar-stories-v1.txt"
CODE_NAME = "oscar-code-v1.txt"
MINI_NAME = "oscar-mini-v1.jsonl"
MANIFEST_NAME = "manifest.json"

STORIES_TARGET_BYTES = 400_000
CODE_TARGET_BYTES = 400_000
MINI_STORIES = 160
MINI_CODE = 96
MINI_CODE_MAX_CHARS = 1600  # keep the JSONL small: only short files
STORY_MIN_WORDS = 80
STORY_MAX_WORDS = 200


# --------------------------------------------------------------------------------------------
# Deterministic random numbers
# --------------------------------------------------------------------------------------------


class Rng:
    """splitmix64: tiny, portable and specified bit for bit (unlike hash() or time)."""

    MASK = (1 << 64) - 1

    def __init__(self, seed: int) -> None:
        """Start the sequence from an integer seed."""
        self.state = seed & self.MASK

    def next_u64(self) -> int:
        """Return the next 64-bit value."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Return an integer in [0, n)."""
        return self.next_u64() % n

    def randint(self, lo: int, hi: int) -> int:
        """Return an integer in [lo, hi], both ends included."""
        return lo + self.below(hi - lo + 1)

    def chance(self, p: float) -> bool:
        """Return True with probability p."""
        return (self.next_u64() >> 11) < p * (1 << 53)

    def choice(self, seq):
        """Return one element of a non-empty sequence."""
        return seq[self.below(len(seq))]

    def sample(self, seq, k: int) -> list:
        """Return k distinct elements of seq, in random order."""
        pool = list(seq)
        for i in range(k):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]

    def shuffled(self, seq) -> list:
        """Return a shuffled copy of seq."""
        return self.sample(seq, len(seq))


# --------------------------------------------------------------------------------------------
# Stories
# --------------------------------------------------------------------------------------------

GIRL_NAMES = (
    "Lily", "Sue", "Mia", "Anna", "Lucy", "Emma", "Sara", "Amy", "Zoe", "Kate", "Ella", "Jane",
    "Mary", "Rose", "Molly", "Lisa", "Ruby", "Sophie", "Ava", "Jill", "Nina", "Tina", "Rosie",
    "Maya", "Lola", "Grace", "Kim", "Bella",
)
BOY_NAMES = (
    "Tom", "Ben", "Max", "Sam", "Tim", "Jack", "Leo", "Jake", "Bob", "Joe", "Timmy", "Billy",
    "Dan", "Alex", "Finn", "Mark", "Pete", "Ted", "Jim", "Roy", "Luke", "Ned", "Eli", "Nick",
)
# (kind, name, pronoun)
ANIMAL_CHARACTERS = (
    ("dog", "Spot", "he"), ("dog", "Buddy", "he"), ("dog", "Daisy", "she"), ("puppy", "Rex", "he"),
    ("puppy", "Polly", "she"), ("cat", "Kitty", "she"), ("cat", "Tiger", "he"),
    ("kitten", "Misty", "she"), ("kitten", "Ginger", "he"), ("bunny", "Hoppy", "he"),
    ("bunny", "Fluffy", "she"), ("bird", "Tweety", "she"), ("bird", "Chirp", "he"),
    ("bear", "Teddy", "he"), ("bear", "Honey", "she"), ("duck", "Quack", "he"),
    ("duck", "Dot", "she"), ("frog", "Freddy", "he"), ("mouse", "Pip", "he"),
    ("mouse", "Squeak", "she"), ("squirrel", "Nutty", "he"), ("fox", "Rusty", "he"),
    ("owl", "Hoot", "he"), ("pig", "Pinky", "she"), ("lamb", "Woolly", "she"),
    ("elephant", "Ellie", "she"), ("monkey", "Coco", "he"), ("turtle", "Shelly", "she"),
)
PRONOUNS = {"he": ("he", "him", "his"), "she": ("she", "her", "her")}
PARENTS = (("mom", "she"), ("mom", "she"), ("dad", "he"), ("dad", "he"), ("grandma", "she"),
           ("grandpa", "he"))


@dataclass(frozen=True)
class Character:
    """A story character: its name, what it is, and its pronoun."""

    name: str
    kind: str
    pronoun: str
    human: bool


@dataclass(frozen=True)
class Thing:
    """An object in a story; tags: l can be lost, b can break, s can get stuck in a tree,
    p can be shared."""

    noun: str
    adjectives: tuple[str, ...]
    tags: str


THINGS = (
    Thing("ball", ("red", "blue", "big", "bouncy", "yellow", "green"), "lsp"),
    Thing("kite", ("red", "blue", "colorful", "yellow", "big"), "sbp"),
    Thing("doll", ("pretty", "little", "soft", "new"), "lbp"),
    Thing("teddy bear", ("soft", "brown", "fluffy", "little"), "lp"),
    Thing("toy car", ("red", "fast", "little", "shiny", "blue"), "lbp"),
    Thing("balloon", ("red", "pink", "big", "purple", "shiny"), "sp"),
    Thing("hat", ("yellow", "funny", "big", "blue", "warm"), "ls"),
    Thing("toy boat", ("little", "red", "white", "wooden"), "bp"),
    Thing("book", ("big", "new", "colorful", "old"), "lp"),
    Thing("blanket", ("soft", "warm", "blue", "pink"), "lp"),
    Thing("toy truck", ("big", "red", "yellow", "green"), "bp"),
    Thing("robot", ("shiny", "little", "silver", "funny"), "bp"),
    Thing("drum", ("little", "red", "loud", "new"), "bp"),
    Thing("toy plane", ("white", "fast", "little", "blue"), "sbp"),
    Thing("shell", ("pretty", "pink", "shiny", "little"), "l"),
    Thing("ring", ("shiny", "gold", "pretty", "little"), "l"),
    Thing("cup", ("blue", "little", "pretty", "new"), "b"),
    Thing("crown", ("shiny", "gold", "paper", "pretty"), "lbp"),
    Thing("puzzle", ("big", "new", "colorful"), "p"),
    Thing("scarf", ("warm", "red", "long", "soft"), "ls"),
    Thing("toy horse", ("brown", "little", "wooden", "white"), "lbp"),
    Thing("jar", ("big", "glass", "little", "shiny"), "b"),
    Thing("frisbee", ("red", "blue", "orange", "green"), "lsp"),
    Thing("bucket", ("red", "little", "yellow", "blue"), "lp"),
)
PLACES = (
    ("park", "at the park"), ("garden", "in the garden"), ("forest", "in the forest"),
    ("beach", "at the beach"), ("pond", "by the pond"), ("backyard", "in the backyard"),
    ("playground", "at the playground"), ("farm", "on the farm"), ("hill", "on the hill"),
    ("lake", "by the lake"), ("meadow", "in the meadow"), ("river", "by the river"),
    ("big field", "in the big field"), ("woods", "in the woods"),
)
SPOTS = (
    "under a big bush", "behind a tree", "in the tall grass", "under a bench",
    "next to a big rock", "under a pile of leaves", "by a small hole", "behind some flowers",
    "near the old fence", "under a log", "by the water", "in a little box",
)
TIMES = ("morning", "day", "afternoon", "sunny day", "warm day", "bright morning", "windy day",
         "summer day", "quiet morning")
HAPPY = ("happy", "glad", "excited", "joyful")
SAD = ("sad", "upset", "unhappy", "worried")
TRAITS = ("kind", "happy", "curious", "brave", "shy", "playful", "friendly", "cheerful", "smart",
          "gentle", "busy", "silly", "sweet", "good")
ACTIVITIES = (
    "run and jump", "sing songs", "draw pictures", "jump in puddles", "pick flowers",
    "look at the clouds", "play games", "read books", "dance", "build sand castles",
    "climb trees", "splash in the water", "chase butterflies", "play hide and seek",
    "ride a bike", "fly a kite", "look for bugs",
)
HOMES = ("small house", "little town", "quiet village", "cozy house", "big city", "happy town",
         "house by the sea", "little house near the woods")
FOODS = ("cookies", "apples", "sandwiches", "cupcakes", "grapes", "carrots", "strawberries",
         "crackers", "oranges", "muffins")
FLOWERS = ("red", "yellow", "pink", "blue", "purple", "white")
WEATHER = (
    "The sun was shining and the birds were singing.",
    "The sky was blue and the grass was green.",
    "It was a warm and sunny day.",
    "There was a soft wind, and the trees moved slowly.",
    "The flowers were bright and pretty.",
    "It was a nice day to play outside.",
    "Some white clouds were moving across the sky.",
)


def make_character(rng: Rng, human: bool, taken: set[str]) -> Character:
    """Pick a child or an animal whose name is not taken yet."""
    while True:
        if human:
            if rng.chance(0.5):
                ch = Character(rng.choice(GIRL_NAMES), "girl", "she", True)
            else:
                ch = Character(rng.choice(BOY_NAMES), "boy", "he", True)
        else:
            kind, name, pronoun = rng.choice(ANIMAL_CHARACTERS)
            ch = Character(name, kind, pronoun, False)
        if ch.name not in taken:
            taken.add(ch.name)
            return ch


def character_slots(prefix: str, name_key: str, ch: Character) -> dict[str, str]:
    """Template slots for a character: name, kind and pronouns (lower and capitalized)."""
    he, him, his = PRONOUNS[ch.pronoun]
    return {
        name_key: ch.name,
        prefix + "kind": ch.kind,
        prefix + "he": he,
        prefix + "He": he.capitalize(),
        prefix + "him": him,
        prefix + "his": his,
        prefix + "His": his.capitalize(),
    }


def story_slots(rng: Rng, thing_tag: str) -> dict[str, str]:
    """Choose the cast, object and place of one story and return the template slots."""
    taken: set[str] = set()
    hero = make_character(rng, rng.chance(0.65), taken)
    friend = make_character(rng, rng.chance(0.7 if hero.human else 0.3), taken)
    parent, parent_pronoun = rng.choice(PARENTS)
    thing = rng.choice([t for t in THINGS if thing_tag in t.tags])
    place, at_place = rng.choice(PLACES)
    spots = rng.sample(SPOTS, 3)
    slots = {}
    slots.update(character_slots("", "A", hero))
    slots.update(character_slots("b", "B", friend))
    phe, phim, phis = PRONOUNS[parent_pronoun]
    slots.update({
        "parent": parent, "Parent": parent.capitalize(), "phe": phe, "pHe": phe.capitalize(),
        "phim": phim, "phis": phis,
        "obj": thing.noun, "adj": rng.choice(thing.adjectives),
        "place": place, "at_place": at_place,
        "spot1": spots[0], "spot2": spots[1], "spot3": spots[2],
        "time": rng.choice(TIMES), "happy": rng.choice(HAPPY), "sad": rng.choice(SAD),
        "trait": rng.choice(TRAITS), "activity": rng.choice(ACTIVITIES),
        "home": rng.choice(HOMES), "food": rng.choice(FOODS), "food2": rng.choice(FOODS),
        "flower": rng.choice(FLOWERS), "weather": rng.choice(WEATHER),
        "hand": "hand" if hero.human else "paw",
        "little_kind": hero.kind if hero.kind in ("puppy", "kitten") else "little " + hero.kind,
    })
    return slots


def intro(rng: Rng, knows_friend: bool) -> list[str]:
    """The opening: who the story is about and what they like; the friend is named only when
    the two already know each other."""
    first = rng.choice((
        "Once upon a time, there was a {trait} {kind} named {A}.",
        "Once upon a time, there was a {little_kind}. {His} name was {A}.",
        "There was once a {trait} {kind} called {A}.",
        "{A} was a {trait} {little_kind}.",
        "One {time}, a {trait} {kind} named {A} woke up with a big smile.",
        "Once upon a time, in a {home}, there lived a {kind} named {A}.",
        "Once there was a {little_kind} named {A} who lived in a {home}.",
    ))
    seconds = [
        "{He} loved to play with {his} {adj} {obj}.",
        "{His} favorite toy was a {adj} {obj}.",
        "{He} had a {adj} {obj} that {he} loved very much.",
        "{A} liked to {activity}.",
        "Every day, {he} liked to {activity} {at_place}.",
    ]
    thirds = [
        "{He} was always {happy} when the sun was out.",
        "{He} lived with {his} {parent} and a lot of toys.",
    ]
    if knows_friend:
        seconds.append("{He} loved to {activity} with {his} friend {B}.")
        thirds += ["{His} best friend was a {bkind} named {B}.", "{His} best friend was {B}."]
    parts = [first, rng.choice(seconds)]
    if rng.chance(0.3):
        parts.append(rng.choice(thirds))
    return parts


def ending(rng: Rng) -> list[str]:
    """An optional closing line shared by all arcs."""
    if not rng.chance(0.45):
        return []
    return [rng.choice((
        "It was a very good day.",
        "And they all lived happily ever after.",
        "That night, {A} went to bed with a big smile on {his} face.",
        "{A} would never forget this day.",
        "The end.",
        "It was the best day ever.",
    ))]


def arc_lost(rng: Rng) -> list[str]:
    """Something is lost and found again with help."""
    s = [rng.choice((
        "One {time}, {A} took {his} {obj} to the {place}.",
        "One day, {A} and {B} went to play {at_place}. {A} brought {his} {adj} {obj}.",
        "One {time}, {A} went to the {place} with {his} {parent}. {He} took {his} {obj} with {him}.",
    ))]
    if rng.chance(0.4):
        s.append("{weather}")
    s.append(rng.choice((
        "{He} played with it for a long time.",
        "{He} ran and laughed and had lots of fun.",
        "{He} played with {his} {obj} until {he} was very tired.",
    )))
    s.append(rng.choice((
        "But when it was time to go home, the {obj} was gone!",
        "Then {A} put the {obj} down to look at a butterfly. When {he} looked back, it was not there.",
        "Then {he} stopped to drink some water. When {he} came back, {his} {obj} was gone.",
    )))
    s.append(rng.choice((
        "{A} felt very {sad}. {He} started to cry.",
        "{A} was very {sad}. {His} eyes filled with tears.",
        "{A} looked and looked, but {he} could not find it. {He} felt {sad}.",
    )))
    s.append(rng.choice((
        '"Where is my {obj}?" {A} said.',
        '"Oh no! I lost my {obj}!" cried {A}.',
        '"My {obj}! Where did it go?" said {A}.',
    )))
    helper = rng.below(3)
    if helper == 0:
        s.append(rng.choice((
            '{B} saw that {A} was sad. "Don\'t cry, {A}," {bhe} said. "I will help you find it."',
            '{B} came over. "What is wrong?" {bhe} asked. {A} told {bhim} about the {obj}. '
            '"Let\'s look for it together," said {B}.',
        )))
        who = "{B}"
    elif helper == 1:
        s.append(rng.choice((
            '{His} {parent} gave {him} a hug. "We will find it," {phe} said.',
            '"Don\'t worry," said {Parent}. "Let\'s look for it together."',
        )))
        who = "{Parent}"
    else:
        s.append(rng.choice((
            'A little bird flew down. "I saw your {obj}," said the bird. "Follow me!"',
            'A friendly squirrel came down from a tree. "I can help you look," it said.',
        )))
        who = "the bird" if "bird" in s[-1] else "the squirrel"
    s.append(rng.choice((
        "They looked {spot1}. It was not there. They looked {spot2}. It was not there too.",
        "They looked {spot1} and {spot2}, but they did not see it.",
        "They looked everywhere.",
    )))
    s.append(rng.choice((
        "Then " + who + " saw something {adj} {spot3}. It was the {obj}!",
        "At last, {A} saw the {obj} {spot3}!",
        "Then they found it {spot3}. It was the {obj}!",
    )))
    s.append(rng.choice((
        "{A} was so {happy}. {He} gave " + who + " a big hug.",
        '"Thank you!" said {A}. {He} was very {happy}.',
        "{A} jumped up and down. {He} was so {happy} to have {his} {obj} back.",
    )))
    s.append(rng.choice((
        "From that day on, {A} always kept {his} {obj} close.",
        "{A} learned that friends help each other.",
        "{A} played with the {obj} all day, and this time {he} did not lose it.",
        "They went home together, and {A} held {his} {obj} very tight.",
    )))
    return s


def arc_broken(rng: Rng) -> list[str]:
    """A toy breaks and a grown-up helps to fix it."""
    s = [rng.choice((
        "One {time}, {A} was playing with {his} {obj} {at_place}.",
        "One day, {A} wanted to show {his} new {obj} to {B}.",
        "{A} took {his} {adj} {obj} outside to play.",
    ))]
    friend_broke = rng.chance(0.35)
    if friend_broke:
        s.append('{B} wanted to hold it. {bHe} pulled, and {A} pulled. Then, snap! The {obj} broke.')
    else:
        s.append(rng.choice((
            "{He} ran too fast and fell over a rock. The {obj} fell and broke!",
            "{He} dropped it by mistake, and it broke into two pieces.",
            "The {obj} fell off the table and broke.",
            "{He} threw it up high, but {he} did not catch it. Crack! The {obj} broke.",
        )))
    s.append(rng.choice((
        '"My {obj} is broken!" {A} cried.',
        "{A} looked at the broken {obj}. {He} felt very {sad}.",
        "{A} sat down and began to cry.",
    )))
    if friend_broke:
        s.append(rng.choice((
            '{B} felt bad. "I am sorry, {A}," {bhe} said. "I did not want to break it."',
            '{B} looked at the ground. "I am so sorry," {bhe} said quietly.',
        )))
        s.append(rng.choice((
            '{A} wiped {his} eyes. "It\'s okay," {he} said. "It was an accident."',
            "{A} was still sad, but {he} knew it was an accident.",
        )))
    s.append(rng.choice((
        '{His} {parent} heard the crying and came to see. "What happened?" asked {Parent}.',
        "Then {his} {parent} came outside. {pHe} saw the broken {obj}.",
    )))
    s.append(rng.choice((
        '"Don\'t worry," said {Parent}. "We can fix it." {pHe} got some glue and fixed the {obj}.',
        "{Parent} smiled. {pHe} took the pieces and put them back together with some tape.",
        '"Let me see," said {Parent}. {pHe} worked on it for a little while.',
    )))
    s.append(rng.choice((
        "Soon the {obj} looked almost like new.",
        "It was not perfect, but {A} loved it even more.",
        "When {phe} was done, the {obj} worked again!",
    )))
    s.append(rng.choice((
        '"Thank you, {Parent}!" said {A}. {He} gave {phim} a big hug.',
        "{A} was so {happy}. {He} thanked {his} {parent} again and again.",
    )))
    s.append(rng.choice((
        "{A} learned to be more careful with {his} toys.",
        "From then on, {A} played with the {obj} very gently.",
        "{A} and {B} played with the {obj} together, and they were very careful.",
    )))
    return s


def arc_sharing(rng: Rng) -> list[str]:
    """The hero does not want to share, then learns that sharing is more fun."""
    s = [rng.choice((
        "{A} had a {adj} {obj}. {He} liked it very much.",
        "{A} got a new {obj} for {his} birthday. It was {adj} and {A} loved it.",
    ))]
    s.append(rng.choice((
        "One day, {B} came to play.",
        "One {time}, {A} took the {obj} to the {place}, and {B} was there too.",
        "Later, {his} friend {B} came over to {his} house.",
    )))
    s.append(rng.choice((
        '{B} saw the {obj}. "Can I play with it?" {bhe} asked.',
        '"Wow, what a nice {obj}!" said {B}. "Can I try it?"',
    )))
    s.append(rng.choice((
        '"No!" said {A}. "It is mine!"',
        '{A} held the {obj} close. "No, it is my {obj}," {he} said.',
    )))
    s.append(rng.choice((
        "{B} was {sad}. {bHe} sat down and did not say anything.",
        "{B} looked at the ground. {bHe} felt very {sad}.",
    )))
    s.append(rng.choice((
        "{A} looked at {B}. {He} did not like to see {bhim} sad.",
        '{A}\'s {parent} saw what happened. "Sharing is caring, {A}," {phe} said softly.',
        "{A} played alone for a while, but it was not much fun.",
    )))
    s.append(rng.choice((
        '{A} gave the {obj} to {B}. "We can play together," {he} said.',
        '{A} walked over to {B}. "I am sorry. You can play with my {obj} too," {he} said.',
    )))
    s.append(rng.choice((
        "{B} smiled a big smile. They took turns with the {obj}.",
        "They played with the {obj} together. They laughed and had lots of fun.",
        "{B} was so {happy}. The two friends played all {time} long.",
    )))
    s.append(rng.choice((
        "{A} learned that sharing makes everyone happy.",
        "Playing together was much more fun than playing alone.",
        "From that day on, {A} and {B} always shared their toys.",
    )))
    return s


FEARS = (
    (
        "When night came, {A} did not want to go to bed. {He} was scared of the dark.",
        '{Parent} gave {him} a little night light. "Now you can see everything," {phe} said.',
        "{A} looked around. There were no monsters, just {his} toys and {his} bed.",
    ),
    (
        "One night, there was a big storm. Boom! The thunder was very loud, and {A} was scared.",
        '{Parent} came and sat on the bed. "Thunder is just a big noise from the clouds," '
        '{phe} said. "It cannot hurt you."',
        "{A} held {his} {obj} and listened to the rain. Soon the storm went away.",
    ),
    (
        "{A} went to the playground. There was a very tall slide. {A} wanted to go down, "
        "but {he} was scared.",
        '{B} said, "I will go with you. We can do it together."',
        "They climbed up and went down the slide. Whee! It was so much fun.",
    ),
    (
        "{A} went to the lake with {his} {parent}. The water looked very deep, and {A} was "
        "scared to go in.",
        '{Parent} held {his} {hand}. "I am right here," {phe} said. "We will go slowly."',
        "{A} put one foot in the water, then the other. Soon {he} was splashing and laughing.",
    ),
    (
        "Next door there lived a big dog. It barked very loud, and {A} was scared of it.",
        'One day, the dog\'s owner said, "His name is Bo. He is very friendly. He just wants '
        'to play."',
        "{A} held out {his} {hand}. The dog licked it and wagged its tail.",
    ),
    (
        "It was {A}'s first day at school. {He} did not know anyone, and {he} felt scared.",
        '{His} {parent} said, "Just say hello. You will make a new friend." Then a {bkind} '
        "named {B} sat next to {him}.",
        '{B} said, "Do you want to draw with me?" {A} nodded, and they drew a big sun together.',
    ),
    (
        "{A} wanted to ride {his} new bike, but {he} was scared to fall.",
        '{Parent} held the bike. "I will hold on until you are ready," {phe} said.',
        "{A} pushed the pedals. Then {Parent} let go, and {A} rode all by {himself}!",
    ),
)


def arc_scared(rng: Rng) -> list[str]:
    """The hero is afraid of something and finds courage."""
    trigger, help_line, brave = rng.choice(FEARS)
    s = [trigger]
    s.append(rng.choice((
        '"I am scared," {A} said in a small voice.',
        "{He} did not want to try. {He} wanted to hide.",
        "{His} heart went fast, and {he} held {his} {obj} tight.",
    )))
    s.append(help_line)
    s.append(rng.choice((
        "{A} took a deep breath.",
        "{A} thought about it for a moment.",
        '"Okay," said {A}. "I will try."',
    )))
    s.append(brave)
    s.append(rng.choice((
        "{A} was not scared anymore.",
        "{He} felt very brave and proud.",
        "{A} smiled. It was not so bad after all.",
    )))
    s.append(rng.choice((
        "{A} learned that being brave means trying even when you are scared.",
        "Sometimes the things we fear are not so bad after all.",
        '"I did it!" said {A}. Everyone clapped and cheered.',
        "From that day on, {A} was a little bit braver.",
    )))
    return s


def arc_stuck(rng: Rng) -> list[str]:
    """Something (or a kitten) is stuck up a tree and gets down again."""
    kitten = rng.chance(0.3)
    s = [rng.choice((
        "One {time}, {A} and {B} were playing {at_place}.",
        "{A} went to the {place} with {his} friend {B}.",
    ))]
    if kitten:
        s.append('Then they heard a small sound. "Meow!" A little kitten was stuck high up in a tree.')
        s.append(rng.choice((
            "The kitten was scared. It could not get down.",
            '"Poor kitten," said {A}. "We have to help it."',
        )))
        thing = "the kitten"
    else:
        s.append(rng.choice((
            "The wind was strong. Suddenly, it blew {A}'s {obj} up into a tall tree!",
            "{A} threw the {obj} very high. It flew up and got stuck in a tree.",
        )))
        s.append(rng.choice((
            '"Oh no! My {obj}!" cried {A}.',
            "{A} looked up at the {obj}. It was so high!",
        )))
        thing = "the {obj}"
    s.append(rng.choice((
        "{A} jumped and jumped, but {he} could not reach it.",
        "{B} tried to climb the tree, but the tree was too tall.",
        "They tried and tried, but it was too high.",
    )))
    way = rng.below(3)
    if way == 0:
        s.append("Then {A} had an idea. {He} ran to get {his} {parent}.")
        s.append("{Parent} came with a big ladder. {pHe} climbed up and got " + thing + ".")
    elif way == 1:
        s.append('Then {B} said, "I have an idea! Let\'s use a long stick."')
        s.append("They found a long stick and pushed very gently. Soon " + thing + " came down.")
    else:
        s.append('A big bird saw them. "I can help," said the bird.')
        s.append("The bird flew up to the top of the tree and helped " + thing + " get down.")
    if kitten:
        s.append(rng.choice((
            "The kitten licked {A}'s hand. It was not scared anymore.",
            "The kitten purred and rubbed against {A}'s leg.",
        )))
        s.append(rng.choice((
            "The kitten's family came to get it. They thanked {A} and {B} for their help.",
            "{A}'s {parent} said {A} could keep the kitten. {A} named it Lucky.",
        )))
    else:
        s.append(rng.choice((
            '"Thank you!" said {A}. {He} hugged {his} {obj}.',
            "{A} was so {happy} to have {his} {obj} back.",
        )))
    s.append(rng.choice((
        "{A} and {B} felt very {happy}. Working together made everything better.",
        "They learned that when you work together, you can fix any problem.",
        "Then they played until it was time to go home.",
    )))
    return s


def arc_rain(rng: Rng) -> list[str]:
    """A picnic is rained out, but an indoor picnic is just as good."""
    s = [rng.choice((
        "One {time}, {A} and {his} {parent} wanted to have a picnic {at_place}.",
        "{A} was very excited. Today {he} was going on a picnic with {B}.",
    ))]
    s.append(rng.choice((
        "They put {food}, {food2} and juice in a big basket.",
        "{A} helped to make {food} and put them in the basket.",
    )))
    s.append(rng.choice((
        "But just as they were ready to go, dark clouds came. Then it began to rain.",
        "But then the sky turned gray. Drip, drop! It started to rain.",
    )))
    s.append(rng.choice((
        '{A} looked out the window. "Now we can\'t have our picnic," {he} said sadly.',
        "{A} was {sad}. {He} wanted to go outside so much.",
    )))
    s.append(rng.choice((
        '{Parent} smiled. "We can have a picnic inside!" {phe} said.',
        '{B} had an idea. "Let\'s have our picnic in the living room!"',
    )))
    s.append(rng.choice((
        "They put a big blanket on the floor and sat down on it.",
        "They made a little tent with chairs and a blanket.",
    )))
    s.append(rng.choice((
        "They ate the {food} and told funny stories.",
        "They ate and laughed and played games.",
        "They listened to the rain on the roof and ate all the {food}.",
    )))
    s.append(rng.choice((
        "Soon the rain stopped, and a big rainbow came out.",
        "After a while, the sun came out again.",
    )))
    s.append(rng.choice((
        "{A} said it was the best picnic ever.",
        '"Rainy days can be fun too," said {A} with a smile.',
        "{A} learned that you can have fun anywhere.",
    )))
    return s


def arc_new_friend(rng: Rng) -> list[str]:
    """The hero meets someone shy and they become friends."""
    s = [rng.choice((
        "One {time}, {A} went to the {place}. {He} wanted to play, but {he} did not know anyone there.",
        "A new family moved in next to {A}'s house.",
        "{A} was playing alone {at_place}.",
    ))]
    s.append(rng.choice((
        "Then {he} saw a {bkind} sitting alone {spot1}.",
        "{He} saw a little {bkind} who looked shy and a bit {sad}.",
    )))
    s.append('"Hi, I am {A}," {he} said. "What is your name?"')
    s.append(rng.choice((
        '"I am {B}," said the {bkind} quietly.',
        '"My name is {B}," the {bkind} said with a small smile.',
    )))
    s.append(rng.choice((
        '"Do you want to play with my {obj}?" asked {A}. {B} smiled and nodded.',
        '"Do you want to {activity} with me?" asked {A}. "Yes!" said {B}.',
    )))
    s.append(rng.choice((
        "They played all {time} long. They laughed and ran and had lots of fun.",
        "They played together until the sun went down.",
        "{B} was not shy anymore. {bHe} laughed and played with {A}.",
    )))
    if rng.chance(0.4):
        s.append("{weather}")
    s.append(rng.choice((
        'When it was time to go home, {B} said, "Can we play again tomorrow?"',
        '"See you tomorrow!" said {A} as {he} waved goodbye.',
    )))
    s.append(rng.choice((
        "From that day on, {A} and {B} were best friends.",
        "{A} was {happy}. {He} had a new friend.",
        "{A} learned that saying hello is the first step to a new friend.",
    )))
    return s


# (at home?, need, offer, what the hero does, thanks)
HELP_NEEDS = (
    (
        False,
        "{A} saw an old lady with a big, heavy bag. She could not carry it up the hill.",
        '"Can I help you?" asked {A}. The old lady smiled. "Yes, please," she said.',
        "{A} held one side of the bag, and together they walked up the hill.",
        'At the top, the old lady gave {A} a shiny red apple. "Thank you, dear," she said.',
    ),
    (
        False,
        "{A} found a little bird on the ground. It had a hurt wing and could not fly.",
        '"Poor little bird," said {A}. {He} picked it up very gently.',
        "{A} made a soft bed for the bird in a box and gave it water and seeds.",
        "After a few days, the bird was better. It flew up into the sky and sang a happy song.",
    ),
    (
        True,
        "{A}'s {parent} was very busy. There were many toys and dishes everywhere.",
        '"I will help you," said {A}. {He} picked up all the toys and put them in the box.',
        "Then {he} helped to dry the dishes, one by one.",
        '{Parent} gave {him} a big hug. "You are such a good helper," {phe} said.',
    ),
    (
        False,
        "{A} saw a little puppy all alone {at_place}. It looked lost and scared.",
        "{A} looked at the puppy's collar. It had a name and a house number on it.",
        "{A} and {his} {parent} walked the puppy down the street to its house.",
        "A little girl opened the door and hugged the puppy. \"Thank you for bringing him home!\" she said.",
    ),
    (
        False,
        "{B} fell down and hurt {bhis} knee. {bHe} started to cry.",
        '{A} ran to {bhim}. "Are you okay?" {he} asked.',
        "{A} helped {B} up and walked with {bhim} to {his} {parent}, who put a bandage on the knee.",
        '{B} stopped crying. "Thank you, {A}," {bhe} said. "You are a good friend."',
    ),
)


def arc_helping(rng: Rng) -> list[str]:
    """The hero helps someone in need and feels proud."""
    at_home, need, offer, act, thanks = rng.choice(HELP_NEEDS)
    if at_home:
        s = [rng.choice(("One {time}, {A} was at home.", "It was a rainy day, and {A} was at home."))]
    else:
        s = [rng.choice((
            "One {time}, {A} was walking {at_place}.",
            "One day, {A} was on {his} way home.",
            "{A} was playing with {his} {obj} {at_place} when {he} saw something.",
        ))]
    s += [need, offer, act, thanks]
    s.append(rng.choice((
        "{A} felt warm and {happy} inside.",
        "{A} smiled. Helping others made {him} feel good.",
        "{A} was very proud.",
    )))
    s.append(rng.choice((
        "{A} learned that being kind is the best thing you can do.",
        "From that day on, {A} always looked for ways to help.",
    ) + (() if at_home else ("When {he} got home, {he} told {his} {parent} all about it.",))))
    return s


RULES = (
    (
        "please do not go near the pond",
        "{A} wanted to see the fish. {He} went too close, and splash! {He} fell into the "
        "muddy water.",
    ),
    (
        "do not eat the cookies before dinner",
        "The cookies smelled so good. {A} ate one, then two, then five. Soon {his} tummy hurt.",
    ),
    (
        "please do not play with the ball in the house",
        "{A} threw the ball anyway. It hit a vase, and the vase fell on the floor and broke.",
    ),
    (
        "stay close to me in the store",
        "{A} saw some pretty balloons and ran to look. When {he} turned around, {his} "
        "{parent} was gone.",
    ),
    (
        "put on your coat, it is cold outside",
        "{A} did not want to wear it. Outside, the wind was cold, and soon {he} was shaking.",
    ),
)


def arc_disobey(rng: Rng) -> list[str]:
    """The hero does not listen, has a small accident and says sorry."""
    rule, trouble = rng.choice(RULES)
    s = [rng.choice((
        "One {time}, {A} and {his} {parent} went out together.",
        "{A} was a good {kind}, but sometimes {he} did not listen.",
        "It was a busy day at {A}'s house.",
    ))]
    s.append('{Parent} said, "{A}, ' + rule + '."')
    s.append(rng.choice((
        "But {A} did not listen.",
        '"Okay," said {A}, but {he} was not really listening.',
    )))
    s.append(trouble)
    s.append(rng.choice((
        "{A} felt bad. {He} began to cry.",
        "{A} was scared and {sad}.",
        '"Oh no," said {A} in a small voice.',
    )))
    s.append(rng.choice((
        "{His} {parent} came quickly and helped {him}.",
        "Soon {Parent} was there. {pHe} held {him} close.",
    )))
    s.append(rng.choice((
        '"I am sorry, {Parent}," said {A}. "I should have listened."',
        '"I am sorry," {A} said. "Next time I will listen to you."',
    )))
    s.append(rng.choice((
        '{Parent} hugged {him}. "I know you are sorry," {phe} said. "I love you."',
        '{Parent} smiled. "It\'s okay. Everyone makes mistakes," {phe} said.',
    )))
    s.append(rng.choice((
        "From then on, {A} always listened to {his} {parent}.",
        "{A} learned that it is important to listen.",
        "{A} never forgot what happened that day.",
    )))
    return s


GIFTS = (
    (
        "{He} decided to draw a picture of the whole family.",
        "But the paint spilled all over the paper. The picture was ruined!",
        "{A} got a new paper and tried again. This time {he} went slowly and carefully.",
    ),
    (
        "{He} wanted to pick the prettiest {flower} flowers {at_place}.",
        "But a big wind came and blew all the flowers away.",
        "{B} helped {A} pick new flowers, and they tied them with a ribbon.",
    ),
    (
        "{He} wanted to bake a cake with {B}.",
        "But they put in too much flour, and the cake came out flat and funny.",
        "They laughed and put lots of fruit on top. Now it looked great!",
    ),
    (
        "{He} wanted to make a card with a big heart on it.",
        "But {he} did not know how to write all the words.",
        "{B} helped {him} write the words, and {A} drew the heart.",
    ),
)


def arc_gift(rng: Rng) -> list[str]:
    """The hero makes a gift for a birthday; something goes wrong; it ends well."""
    plan, problem, fix = rng.choice(GIFTS)
    s = [rng.choice((
        "It was {Parent}'s birthday soon. {A} wanted to give {phim} a special gift.",
        "{A} wanted to make {his} {parent} happy, so {he} made a plan.",
    ))]
    s += [plan, problem]
    s.append(rng.choice((
        "{A} was {sad}. {He} wanted the gift to be perfect.",
        '"Oh no!" said {A}. {He} almost started to cry.',
    )))
    s.append(fix)
    s.append(rng.choice((
        "When {Parent} saw the gift, {phe} smiled a big smile.",
        "{A} gave the gift to {Parent} with a big hug.",
    )))
    s.append(rng.choice((
        '"This is the best gift ever!" said {Parent}.',
        '"I love it," said {Parent}. "You made it with love, and that is what counts."',
    )))
    s.append(rng.choice((
        "{A} felt so {happy} and proud.",
        "{A} learned that a gift from the heart is the best gift of all.",
    )))
    return s


def arc_race(rng: Rng) -> list[str]:
    """Two friends race; one falls; the other helps; friendship wins."""
    s = [rng.choice((
        "{A} and {B} liked to run. One day, they had a race to the big tree {at_place}.",
        '"Let\'s have a race!" said {B}. "The first one to the fence wins!"',
    ))]
    s.append('"Ready, set, go!" they said together.')
    s.append(rng.choice((
        "{A} ran very fast. {He} was in front!",
        "They ran as fast as they could. {A} was a little bit faster.",
    )))
    s.append(rng.choice((
        "But then {A} fell down and hurt {his} knee.",
        "But then {A} slipped on the wet grass and fell.",
    )))
    s.append(rng.choice((
        "{B} stopped running. {bHe} came back to help {A} get up.",
        '{B} saw {A} fall. "Are you okay?" {bhe} asked, and {bhe} helped {him} up.',
    )))
    s.append(rng.choice((
        "They walked the rest of the way together, side by side.",
        "They held hands and walked to the end together.",
    )))
    s.append('"Who won?" asked {A}. "We both did!" laughed {B}.')
    s.append(rng.choice((
        "{A} learned that being a good friend is better than winning.",
        "They were both {happy}. Being together was the best part.",
    )))
    return s


def arc_seed(rng: Rng) -> list[str]:
    """The hero plants a seed, waits patiently and sees it grow."""
    s = [rng.choice((
        "One {time}, {A} found a little seed {at_place}.",
        "{A}'s {parent} gave {him} a tiny seed.",
    ))]
    s.append(rng.choice((
        "{He} put it in a pot with some dirt and gave it water.",
        "{He} planted it in the garden and gave it some water.",
    )))
    s.append(rng.choice((
        "Every day {he} looked at it, but nothing happened.",
        "The next day, {A} ran to look. There was nothing there, just dirt.",
    )))
    s.append('"Why is it not growing?" {he} asked.')
    s.append('{Parent} said, "Plants need time, sun and water. You must be patient."')
    s.append(rng.choice((
        "So {A} waited. {He} watered the seed every morning.",
        "So {A} was patient. {He} sang songs to the seed and gave it water.",
    )))
    s.append(rng.choice((
        "One day, a tiny green leaf came out!",
        "Then one morning, {A} saw a little green plant.",
    )))
    s.append(rng.choice((
        "It grew and grew. Soon there was a big {flower} flower.",
        "It grew into a tall plant with {flower} flowers.",
    )))
    s.append(rng.choice((
        "{A} was so {happy}. {He} showed the flower to everyone.",
        "{A} learned that good things take time.",
    )))
    return s


def arc_explore(rng: Rng) -> list[str]:
    """The curious hero goes too far and is helped home."""
    s = [rng.choice((
        "{A} was very curious. {He} liked to look at new things.",
        "{A} loved to explore. Every day {he} wanted to find something new.",
    ))]
    s.append(rng.choice((
        "One {time}, {he} saw a little path {at_place} and followed it.",
        "One day, {he} saw a pretty butterfly and followed it into the {place}.",
    )))
    s.append(rng.choice((
        "{He} found a family of ducks swimming in a small pond.",
        "{He} found a big rock that looked like a sleeping bear.",
        "{He} found a tree full of red apples.",
        "{He} found a shiny stone that was blue and smooth.",
    )))
    s.append("{He} was having so much fun that {he} did not see the sun going down.")
    s.append(rng.choice((
        "When {he} looked around, {he} did not know where {he} was. {He} was lost!",
        "Soon it was getting dark, and {A} could not find the way home.",
    )))
    s.append(rng.choice((
        "{A} felt scared. {He} sat down {spot1}.",
        '"Where is my house?" {A} said. {He} was very {sad}.',
    )))
    s.append(rng.choice((
        'Then a wise old owl flew down. "Follow me," said the owl. "I know the way."',
        "Then {he} heard a voice. It was {B}! \"I will take you home,\" {bhe} said.",
    )))
    s.append("They walked and walked until {A} saw {his} house.")
    s.append(rng.choice((
        "{His} {parent} was waiting at the door and gave {him} a big hug.",
        '{Parent} ran outside. "I was so worried about you," {phe} said.',
    )))
    s.append(rng.choice((
        "{A} learned to always tell {his} {parent} before going far.",
        "{A} was happy to be home, safe and warm.",
    )))
    return s


ARCS: tuple[tuple[Callable[[Rng], list[str]], str], ...] = (
    (arc_lost, "l"), (arc_broken, "b"), (arc_sharing, "p"), (arc_scared, "l"),
    (arc_stuck, "s"), (arc_rain, "p"), (arc_new_friend, "p"), (arc_helping, "l"),
    (arc_disobey, "l"), (arc_gift, "p"), (arc_race, "p"), (arc_seed, "p"), (arc_explore, "l"),
)

_ARTICLE_RE = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")
_SENTENCE_START_RE = re.compile(r'(^|[.!?]\s+"?|^")([a-z])')


def fill(template: str, slots: dict[str, str]) -> str:
    """Fill a story template, fix a/an and capitalize sentence starts."""
    text = template.format_map(slots)
    text = _ARTICLE_RE.sub(lambda m: m.group(1) + "n ", text)
    return _SENTENCE_START_RE.sub(lambda m: m.group(1) + m.group(2).upper(), text)


def generate_story(rng: Rng) -> str:
    """Return one story of STORY_MIN_WORDS to STORY_MAX_WORDS words (one paragraph)."""
    while True:
        arc, tag = rng.choice(ARCS)
        slots = story_slots(rng, tag)
        slots["himself"] = "himself" if slots["he"] == "he" else "herself"
        knows_friend = arc is not arc_new_friend
        body = arc(rng)
        opening = intro(rng, knows_friend)
        if knows_friend and not any("{B}" in s for s in opening + body[:1]) and any(
            "{B}" in s for s in body
        ):
            opening.append(rng.choice((
                "{His} best friend was a {bkind} named {B}.",
                "{He} had a good friend named {B}.",
            )))
        sentences = opening + body + ending(rng)
        text = " ".join(fill(s, slots) for s in sentences)
        if STORY_MIN_WORDS <= len(text.split()) <= STORY_MAX_WORDS:
            return text


def generate_stories(seed: int, target_bytes: int) -> list[str]:
    """Return distinct stories until their text reaches target_bytes."""
    rng = Rng(seed)
    stories: list[str] = []
    seen: set[str] = set()
    size = 0
    while size < target_bytes:
        story = generate_story(rng)
        if story in seen:
            continue
        seen.add(story)
        stories.append(story)
        size += len(story.encode("utf-8")) + 2
    return stories


# --------------------------------------------------------------------------------------------
# Python source
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """Per-file conventions: annotation flavour, docstring format and test framework."""

    typing_module: bool  # List[int] from typing rather than list[int]
    doc: str  # "line", "google" or "sphinx"
    tests: str  # "pytest" or "unittest"

    def list(self, item: str) -> str:
        """A list annotation."""
        return f"List[{item}]" if self.typing_module else f"list[{item}]"

    def dict(self, key: str, value: str) -> str:
        """A dict annotation."""
        return f"Dict[{key}, {value}]" if self.typing_module else f"dict[{key}, {value}]"

    def tuple(self, *items: str) -> str:
        """A tuple annotation."""
        name = "Tuple" if self.typing_module else "tuple"
        return f"{name}[{', '.join(items)}]"

    def opt(self, item: str) -> str:
        """An optional annotation."""
        return f"Optional[{item}]" if self.typing_module else f"{item} | None"

    def opt_ref(self, name: str) -> str:
        """An optional annotation of a class that is not defined yet (a forward reference)."""
        return f'Optional["{name}"]' if self.typing_module else f'"{name} | None"'


@dataclass
class Snippet:
    """One generated unit of code plus the checks a test for it would make.

    A check is ("eq", expr, expected), ("true", expr), ("false", expr), ("stmt", code) or
    ("raises", exception, expr)."""

    name: str
    code: str
    checks: list[tuple[str, ...]]
    entry: str = ""  # the function other generated code calls, where that matters


SEQ_NAMES = ("items", "values", "numbers", "data", "seq", "nums", "elements", "xs")
RESULT_NAMES = ("result", "out", "output", "acc", "collected", "res")
TEXT_NAMES = ("text", "s", "line", "sentence", "raw", "source")
COUNT_NAMES = ("counts", "freq", "tally", "frequencies", "counter")


def render(template: str, **slots: object) -> str:
    """Dedent a $-template and fill its slots."""
    return string.Template(textwrap.dedent(template).strip("\n")).substitute(
        {k: str(v) for k, v in slots.items()})


def lit(value: object) -> str:
    """Python source for a value, with double-quoted strings as in the rest of the code."""
    if isinstance(value, str):
        return json.dumps(value) if "\\" not in value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(lit(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in value.items()) + "}"
    return repr(value)


def article(word: str) -> str:
    """The word with "a" or "an" in front."""
    return ("an " if word[0] in "aeiou" else "a ") + word


def docstring(st: Style, summary: str, args: tuple[tuple[str, str], ...] = (),
              returns: str = "", indent: str = "    ") -> str:
    """A docstring in the file's style, indented for a function body."""
    if st.doc == "line" or not args:
        return f'"""{summary}"""'
    lines = [f'"""{summary}']
    if st.doc == "google":
        lines.append("Args:")
        lines += [f"    {name}: {desc}" for name, desc in args]
        if returns:
            lines += ["Returns:", f"    {returns}"]
    else:
        lines += [f":param {name}: {desc}" for name, desc in args]
        if returns:
            lines.append(f":return: {returns}")
    lines.append('"""')
    return ("\n" + indent).join(lines)


def random_ints(rng: Rng, lo: int = -20, hi: int = 99, n_lo: int = 5, n_hi: int = 9) -> list[int]:
    """A short list of random integers for test data."""
    return [rng.randint(lo, hi) for _ in range(rng.randint(n_lo, n_hi))]


# Sorting and searching ------------------------------------------------------------------------


def s_binary_search(rng: Rng, st: Style) -> Snippet:
    """Iterative binary search."""
    fn = rng.choice(("binary_search", "find_sorted", "bisect_index", "search_sorted"))
    seq = rng.choice(SEQ_NAMES)
    target = rng.choice(("target", "key", "needle", "wanted"))
    lo, hi = rng.choice((("lo", "hi"), ("low", "high"), ("left", "right"), ("start", "end")))
    mid = rng.choice(("mid", "middle", "m", "pivot"))
    doc = docstring(st, f"Return the index of {target} in the sorted {seq}, or -1 if absent.",
                    ((seq, "a list sorted in ascending order."), (target, "the value to find.")),
                    "The position of the value, or -1.")
    code = render("""
        def $fn($seq: $ints, $target: int) -> int:
            $doc
            $lo, $hi = 0, len($seq) - 1
            while $lo <= $hi:
                $mid = ($lo + $hi) // 2
                if $seq[$mid] == $target:
                    return $mid
                if $seq[$mid] < $target:
                    $lo = $mid + 1
                else:
                    $hi = $mid - 1
            return -1
        """, fn=fn, seq=seq, target=target, lo=lo, hi=hi, mid=mid, doc=doc, ints=st.list("int"))
    data = sorted(set(random_ints(rng)))
    present = rng.choice(data)
    missing = max(data) + rng.randint(1, 9)
    return Snippet(fn, code, [("eq", f"{fn}({data}, {present})", lit(data.index(present))),
                              ("eq", f"{fn}({data}, {missing})", "-1"),
                              ("eq", f"{fn}([], 3)", "-1")])


def s_simple_sort(rng: Rng, st: Style) -> Snippet:
    """Bubble, insertion or selection sort on a copy."""
    kind = rng.choice(("bubble", "insertion", "selection"))
    fn = rng.choice((f"{kind}_sort", f"sort_{kind}", f"{kind}_sorted"))
    seq = rng.choice(SEQ_NAMES)
    res = rng.choice(RESULT_NAMES)
    ints = st.list("int")
    doc = docstring(st, f"Return a sorted copy of {seq} using {kind} sort.",
                    ((seq, "the numbers to sort."),), "A new list in ascending order.")
    if kind == "bubble":
        body = render("""
            $res = list($seq)
            n = len($res)
            for i in range(n):
                swapped = False
                for j in range(n - 1 - i):
                    if $res[j] > $res[j + 1]:
                        $res[j], $res[j + 1] = $res[j + 1], $res[j]
                        swapped = True
                if not swapped:  # already sorted, stop early
                    break
            return $res
            """, res=res, seq=seq)
    elif kind == "insertion":
        body = render("""
            $res = list($seq)
            for i in range(1, len($res)):
                current = $res[i]
                j = i - 1
                # shift larger elements one place to the right
                while j >= 0 and $res[j] > current:
                    $res[j + 1] = $res[j]
                    j -= 1
                $res[j + 1] = current
            return $res
            """, res=res, seq=seq)
    else:
        body = render("""
            $res = list($seq)
            for i in range(len($res)):
                smallest = i
                for j in range(i + 1, len($res)):
                    if $res[j] < $res[smallest]:
                        smallest = j
                $res[i], $res[smallest] = $res[smallest], $res[i]
            return $res
            """, res=res, seq=seq)
    code = f"def {fn}({seq}: {ints}) -> {ints}:\n    {doc}\n" + textwrap.indent(body, "    ")
    data = random_ints(rng)
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(sorted(data))),
                              ("eq", f"{fn}([])", "[]")])


def s_merge_sort(rng: Rng, st: Style) -> Snippet:
    """Recursive merge sort with a separate merge helper."""
    fn = rng.choice(("merge_sort", "sort_merge", "msort"))
    merge = rng.choice(("merge", "_merge", "merge_sorted"))
    a, b = rng.choice((("left", "right"), ("first", "second"), ("xs", "ys")))
    seq = rng.choice(("items", "values", "numbers", "data", "seq"))
    ints = st.list("int")
    code = render("""
        def $merge($a: $ints, $b: $ints) -> $ints:
            $doc1
            merged = []
            i = j = 0
            while i < len($a) and j < len($b):
                if $a[i] <= $b[j]:
                    merged.append($a[i])
                    i += 1
                else:
                    merged.append($b[j])
                    j += 1
            merged.extend($a[i:])
            merged.extend($b[j:])
            return merged
        def $fn($seq: $ints) -> $ints:
            $doc2
            if len($seq) <= 1:
                return list($seq)
            middle = len($seq) // 2
            return $merge($fn($seq[:middle]), $fn($seq[middle:]))
        """, merge=merge, a=a, b=b, ints=ints, fn=fn, seq=seq,
        doc1=docstring(st, "Merge two sorted lists into one sorted list."),
        doc2=docstring(st, "Sort a list with merge sort (stable, O(n log n)).",
                       ((seq, "the values to sort."),), "A new sorted list."))
    data = random_ints(rng, n_hi=12)
    x, y = sorted(random_ints(rng, n_hi=5)), sorted(random_ints(rng, n_hi=5))
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(sorted(data))),
                              ("eq", f"{merge}({x}, {y})", lit(sorted(x + y))),
                              ("eq", f"{fn}([1])", "[1]")])


def s_quick_sort(rng: Rng, st: Style) -> Snippet:
    """Quick sort with list comprehensions."""
    fn = rng.choice(("quick_sort", "quicksort", "qsort"))
    seq = rng.choice(("items", "values", "numbers", "data"))
    p = rng.choice(("pivot", "p", "head"))
    ints = st.list("int")
    code = render("""
        def $fn($seq: $ints) -> $ints:
            $doc
            if len($seq) < 2:
                return list($seq)
            $p = $seq[len($seq) // 2]
            smaller = [x for x in $seq if x < $p]
            equal = [x for x in $seq if x == $p]
            larger = [x for x in $seq if x > $p]
            return $fn(smaller) + equal + $fn(larger)
        """, fn=fn, seq=seq, p=p, ints=ints,
        doc=docstring(st, "Return a sorted copy of the list using quick sort."))
    data = random_ints(rng, n_hi=12)
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(sorted(data))),
                              ("eq", f"{fn}([3, 3, 1])", "[1, 3, 3]")])


def s_top_k(rng: Rng, st: Style) -> Snippet:
    """The k largest values with heapq."""
    fn = rng.choice(("top_k", "largest", "k_largest", "best_scores"))
    seq = rng.choice(SEQ_NAMES)
    code = render("""
        def $fn($seq: $ints, k: int = 3) -> $ints:
            $doc
            if k <= 0:
                return []
            return heapq.nlargest(k, $seq)
        """, fn=fn, seq=seq, ints=st.list("int"),
        doc=docstring(st, "Return the k largest values, largest first."))
    data = random_ints(rng)
    k = rng.randint(1, 4)
    return Snippet(fn, code, [("eq", f"{fn}({data}, {k})", lit(sorted(data, reverse=True)[:k])),
                              ("eq", f"{fn}({data}, 0)", "[]")])


# Numbers -------------------------------------------------------------------------------------


def s_gcd(rng: Rng, st: Style) -> Snippet:
    """Euclid's gcd and the lcm built on it."""
    g = rng.choice(("gcd", "greatest_common_divisor", "euclid_gcd"))
    lcm = rng.choice(("lcm", "least_common_multiple"))
    a, b = rng.choice((("a", "b"), ("x", "y"), ("m", "n")))
    code = render("""
        def $g($a: int, $b: int) -> int:
            $doc1
            while $b:
                $a, $b = $b, $a % $b
            return abs($a)
        def $lcm($a: int, $b: int) -> int:
            $doc2
            if $a == 0 or $b == 0:
                return 0
            return abs($a * $b) // $g($a, $b)
        """, g=g, lcm=lcm, a=a, b=b,
        doc1=docstring(st, "Return the greatest common divisor of two integers."),
        doc2=docstring(st, "Return the least common multiple of two integers."))
    x, y = rng.randint(2, 60) * 6, rng.randint(2, 60) * 4
    return Snippet(g, code, [("eq", f"{g}({x}, {y})", lit(math.gcd(x, y))),
                             ("eq", f"{lcm}({x}, {y})", lit(x * y // math.gcd(x, y))),
                             ("eq", f"{lcm}(0, 5)", "0")])


def s_primes(rng: Rng, st: Style) -> Snippet:
    """Trial division and a sieve."""
    is_p = rng.choice(("is_prime", "prime", "check_prime"))
    sieve = rng.choice(("primes_up_to", "sieve", "primes_below", "eratosthenes"))
    n = rng.choice(("n", "limit", "upper"))
    code = render("""
        def $is_p(number: int) -> bool:
            $doc1
            if number < 2:
                return False
            divisor = 2
            while divisor * divisor <= number:
                if number % divisor == 0:
                    return False
                divisor += 1
            return True
        def $sieve($n: int) -> $ints:
            $doc2
            if $n < 2:
                return []
            flags = [True] * ($n + 1)
            flags[0] = flags[1] = False
            for i in range(2, int($n ** 0.5) + 1):
                if flags[i]:
                    for multiple in range(i * i, $n + 1, i):
                        flags[multiple] = False
            return [i for i, is_set in enumerate(flags) if is_set]
        """, is_p=is_p, sieve=sieve, n=n, ints=st.list("int"),
        doc1=docstring(st, "Return True if number is prime."),
        doc2=docstring(st, f"Return all primes <= {n} (sieve of Eratosthenes).",
                       ((n, "the largest number to consider."),), "The primes in order."))
    limit = rng.randint(20, 60)
    primes = [p for p in range(2, limit + 1) if all(p % d for d in range(2, p))]
    return Snippet(sieve, code, [("eq", f"{sieve}({limit})", lit(primes)),
                                 ("true", f"{is_p}({rng.choice(primes)})"),
                                 ("false", f"{is_p}({rng.choice((1, 9, 15, 21, 49))})")])


def s_fibonacci(rng: Rng, st: Style) -> Snippet:
    """Fibonacci numbers, iteratively, memoized or as a generator."""
    kind = rng.below(3)
    n = rng.choice(("n", "count", "k"))
    fib = [0, 1]
    while len(fib) < 30:
        fib.append(fib[-1] + fib[-2])
    k = rng.randint(5, 25)
    if kind == 0:
        fn = rng.choice(("fibonacci", "fib", "nth_fibonacci"))
        code = render("""
            def $fn($n: int) -> int:
                $doc
                if $n < 0:
                    raise ValueError("$n must be non-negative")
                a, b = 0, 1
                for _ in range($n):
                    a, b = b, a + b
                return a
            """, fn=fn, n=n, doc=docstring(st, f"Return the {n}-th Fibonacci number."))
        checks = [("eq", f"{fn}({k})", lit(fib[k])), ("raises", "ValueError", f"{fn}(-1)")]
    elif kind == 1:
        fn = rng.choice(("fib", "fibonacci", "fib_memo"))
        code = render("""
            @lru_cache(maxsize=None)
            def $fn($n: int) -> int:
                $doc
                if $n < 2:
                    return $n
                return $fn($n - 1) + $fn($n - 2)
            """, fn=fn, n=n, doc=docstring(st, "Fibonacci with memoization."))
        checks = [("eq", f"{fn}({k})", lit(fib[k])), ("eq", f"{fn}(1)", "1")]
    else:
        fn = rng.choice(("fibonacci_numbers", "iter_fib", "fib_sequence"))
        code = render("""
            def $fn($n: int) -> Iterator[int]:
                $doc
                a, b = 0, 1
                for _ in range($n):
                    yield a
                    a, b = b, a + b
            """, fn=fn, n=n, doc=docstring(st, f"Yield the first {n} Fibonacci numbers."))
        checks = [("eq", f"list({fn}({k % 12}))", lit(fib[:k % 12]))]
    return Snippet(fn, code, checks)


def s_factorial(rng: Rng, st: Style) -> Snippet:
    """Factorial, recursive or with reduce."""
    fn = rng.choice(("factorial", "fact", "product_up_to"))
    n = rng.choice(("n", "number", "value"))
    if rng.chance(0.5):
        code = render("""
            def $fn($n: int) -> int:
                $doc
                if $n < 0:
                    raise ValueError(f"factorial is not defined for {$n}")
                return 1 if $n <= 1 else $n * $fn($n - 1)
            """, fn=fn, n=n, doc=docstring(st, f"Return {n}! recursively."))
    else:
        code = render("""
            def $fn($n: int) -> int:
                $doc
                if $n < 0:
                    raise ValueError(f"factorial is not defined for {$n}")
                return reduce(lambda acc, x: acc * x, range(2, $n + 1), 1)
            """, fn=fn, n=n, doc=docstring(st, f"Return {n}! using functools.reduce."))
    k = rng.randint(3, 12)
    value = 1
    for i in range(2, k + 1):
        value *= i
    return Snippet(fn, code, [("eq", f"{fn}({k})", lit(value)), ("eq", f"{fn}(0)", "1"),
                              ("raises", "ValueError", f"{fn}(-2)")])


def s_prime_factors(rng: Rng, st: Style) -> Snippet:
    """Prime factorisation by trial division."""
    fn = rng.choice(("prime_factors", "factorize", "factors"))
    n = rng.choice(("n", "number", "value"))
    code = render("""
        def $fn($n: int) -> $ints:
            $doc
            $res = []
            divisor = 2
            while $n > 1:
                while $n % divisor == 0:
                    $res.append(divisor)
                    $n //= divisor
                divisor += 1
            return $res
        """, fn=fn, n=n, res=rng.choice(RESULT_NAMES), ints=st.list("int"),
        doc=docstring(st, "Return the prime factors of a positive integer, smallest first."))
    k = rng.choice((2, 3, 5, 7)) * rng.choice((2, 3, 11, 13)) * rng.randint(2, 9)
    factors, m, d = [], k, 2
    while m > 1:
        while m % d == 0:
            factors.append(d)
            m //= d
        d += 1
    return Snippet(fn, code, [("eq", f"{fn}({k})", lit(factors)), ("eq", f"{fn}(1)", "[]")])


def s_digits(rng: Rng, st: Style) -> Snippet:
    """Digit sum and integer to binary conversion."""
    ds = rng.choice(("digit_sum", "sum_of_digits", "digits_total"))
    tb = rng.choice(("to_binary", "binary_string", "int_to_bin"))
    n = rng.choice(("n", "number", "value"))
    code = render("""
        def $ds($n: int) -> int:
            $doc1
            return sum(int(ch) for ch in str(abs($n)))
        def $tb($n: int) -> str:
            $doc2
            if $n == 0:
                return "0"
            bits = []
            while $n > 0:
                bits.append(str($n % 2))
                $n //= 2
            return "".join(reversed(bits))
        """, ds=ds, tb=tb, n=n, doc1=docstring(st, "Return the sum of the decimal digits."),
        doc2=docstring(st, "Return the binary representation of a non-negative integer."))
    k = rng.randint(100, 99999)
    b = rng.randint(1, 500)
    return Snippet(ds, code, [("eq", f"{ds}({k})", lit(sum(int(c) for c in str(k)))),
                              ("eq", f"{tb}({b})", lit(bin(b)[2:])), ("eq", f"{tb}(0)", "'0'")])


def s_roman(rng: Rng, st: Style) -> Snippet:
    """Integer to Roman numerals."""
    fn = rng.choice(("to_roman", "roman", "int_to_roman"))
    code = render("""
        NUMERALS = [
            (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
        ]
        def $fn(number: int) -> str:
            $doc
            if not 0 < number < 4000:
                raise ValueError("number must be between 1 and 3999")
            parts = []
            for value, symbol in NUMERALS:
                count, number = divmod(number, value)
                parts.append(symbol * count)
            return "".join(parts)
        """, fn=fn, doc=docstring(st, "Convert an integer to a Roman numeral."))
    k = rng.randint(1, 3999)
    out, m = "", k
    for value, symbol in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"),
                          (90, "XC"), (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"),
                          (4, "IV"), (1, "I")):
        c, m = divmod(m, value)
        out += symbol * c
    return Snippet(fn, code, [("eq", f"{fn}({k})", lit(out)), ("eq", f"{fn}(4)", "'IV'"),
                              ("raises", "ValueError", f"{fn}(0)")])


def s_temperature(rng: Rng, st: Style) -> Snippet:
    """Temperature conversions."""
    c2f = rng.choice(("celsius_to_fahrenheit", "c_to_f", "to_fahrenheit"))
    f2c = rng.choice(("fahrenheit_to_celsius", "f_to_c", "to_celsius"))
    code = render("""
        def $c2f(celsius: float) -> float:
            $doc1
            return celsius * 9 / 5 + 32
        def $f2c(fahrenheit: float) -> float:
            $doc2
            return (fahrenheit - 32) * 5 / 9
        """, c2f=c2f, f2c=f2c, doc1=docstring(st, "Convert degrees Celsius to Fahrenheit."),
        doc2=docstring(st, "Convert degrees Fahrenheit to Celsius."))
    c = rng.randint(-30, 40)
    return Snippet(c2f, code, [("eq", f"{c2f}({c})", lit(c * 9 / 5 + 32)),
                               ("eq", f"round({f2c}({c2f}({c})), 6)",
                                lit(round((c * 9 / 5 + 32 - 32) * 5 / 9, 6))),
                               ("eq", f"{f2c}(212)", "100.0")])


def s_clamp(rng: Rng, st: Style) -> Snippet:
    """Clamp and min-max normalisation."""
    clamp = rng.choice(("clamp", "bound", "limit"))
    norm = rng.choice(("normalize", "min_max_scale", "rescale"))
    seq = rng.choice(SEQ_NAMES)
    floats = st.list("float")
    code = render("""
        def $clamp(value: float, lower: float, upper: float) -> float:
            $doc1
            if lower > upper:
                raise ValueError("lower must not exceed upper")
            return max(lower, min(value, upper))
        def $norm($seq: $floats) -> $floats:
            $doc2
            if not $seq:
                return []
            smallest, largest = min($seq), max($seq)
            span = largest - smallest
            if span == 0:
                return [0.0 for _ in $seq]
            return [(x - smallest) / span for x in $seq]
        """, clamp=clamp, norm=norm, seq=seq, floats=floats,
        doc1=docstring(st, "Limit value to the closed range [lower, upper]."),
        doc2=docstring(st, "Scale values linearly into [0, 1]."))
    v = rng.randint(-50, 150)
    return Snippet(clamp, code, [("eq", f"{clamp}({v}, 0, 100)", lit(max(0, min(v, 100)))),
                                 ("eq", f"{norm}([2, 4, 6])", "[0.0, 0.5, 1.0]"),
                                 ("eq", f"{norm}([5, 5])", "[0.0, 0.0]"),
                                 ("raises", "ValueError", f"{clamp}(1, 5, 2)")])


# Statistics ----------------------------------------------------------------------------------


def s_mean_std(rng: Rng, st: Style) -> Snippet:
    """Mean, variance and standard deviation by hand."""
    mean = rng.choice(("mean", "average", "arithmetic_mean"))
    var = rng.choice(("variance", "population_variance", "var"))
    std = rng.choice(("std_dev", "stdev", "standard_deviation"))
    seq = rng.choice(SEQ_NAMES)
    floats = st.list("float")
    code = render("""
        def $mean($seq: $floats) -> float:
            $doc1
            if not $seq:
                raise ValueError("$mean() of an empty list")
            return sum($seq) / len($seq)
        def $var($seq: $floats) -> float:
            $doc2
            centre = $mean($seq)
            return sum((x - centre) ** 2 for x in $seq) / len($seq)
        def $std($seq: $floats) -> float:
            $doc3
            return math.sqrt($var($seq))
        """, mean=mean, var=var, std=std, seq=seq, floats=floats,
        doc1=docstring(st, "Return the arithmetic mean."),
        doc2=docstring(st, "Return the population variance."),
        doc3=docstring(st, "Return the population standard deviation."))
    data = random_ints(rng, 0, 50)
    m = sum(data) / len(data)
    v = sum((x - m) ** 2 for x in data) / len(data)
    return Snippet(mean, code, [("eq", f"round({mean}({data}), 4)", lit(round(m, 4))),
                                ("eq", f"round({var}({data}), 4)", lit(round(v, 4))),
                                ("eq", f"{std}([2, 2, 2])", "0.0"),
                                ("raises", "ValueError", f"{mean}([])")])


def s_median(rng: Rng, st: Style) -> Snippet:
    """Median and percentile with linear interpolation."""
    med = rng.choice(("median", "middle_value", "find_median"))
    pct = rng.choice(("percentile", "quantile_at", "pct"))
    seq = rng.choice(SEQ_NAMES)
    floats = st.list("float")
    code = render("""
        def $med($seq: $floats) -> float:
            $doc1
            ordered = sorted($seq)
            n = len(ordered)
            if n == 0:
                raise ValueError("no data")
            mid = n // 2
            if n % 2:
                return float(ordered[mid])
            return (ordered[mid - 1] + ordered[mid]) / 2
        def $pct($seq: $floats, q: float) -> float:
            $doc2
            if not 0 <= q <= 100:
                raise ValueError(f"q must be in [0, 100], got {q}")
            ordered = sorted($seq)
            position = (len(ordered) - 1) * q / 100
            lower = int(position)
            upper = min(lower + 1, len(ordered) - 1)
            weight = position - lower
            return ordered[lower] * (1 - weight) + ordered[upper] * weight
        """, med=med, pct=pct, seq=seq, floats=floats,
        doc1=docstring(st, "Return the median of the values."),
        doc2=docstring(st, "Return the q-th percentile using linear interpolation.",
                       ((seq, "the data."), ("q", "percentile between 0 and 100.")),
                       "The interpolated value."))
    data = random_ints(rng, 0, 90)
    o = sorted(data)
    n = len(o)
    median = float(o[n // 2]) if n % 2 else (o[n // 2 - 1] + o[n // 2]) / 2
    return Snippet(med, code, [("eq", f"{med}({data})", lit(median)),
                               ("eq", f"{pct}({data}, 100)", lit(float(max(data)))),
                               ("eq", f"{pct}({data}, 0)", lit(float(min(data)))),
                               ("raises", "ValueError", f"{pct}([1, 2], 120)")])


def s_moving_average(rng: Rng, st: Style) -> Snippet:
    """Moving average over a sliding window."""
    fn = rng.choice(("moving_average", "rolling_mean", "sliding_average"))
    seq = rng.choice(SEQ_NAMES)
    w = rng.choice(("window", "size", "width"))
    floats = st.list("float")
    if rng.chance(0.5):
        body = f"""
            return [sum({seq}[i:i + {w}]) / {w} for i in range(len({seq}) - {w} + 1)]"""
    else:
        body = f"""
            averages = []
            total = sum({seq}[:{w}])
            averages.append(total / {w})
            for i in range({w}, len({seq})):
                total += {seq}[i] - {seq}[i - {w}]
                averages.append(total / {w})
            return averages"""
    code = render("""
        def $fn($seq: $floats, $w: int) -> $floats:
            $doc
            if $w <= 0:
                raise ValueError("$w must be positive")
            if len($seq) < $w:
                return []
        """, fn=fn, seq=seq, w=w, floats=floats,
        doc=docstring(st, "Return the averages of each full window.")) + "\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ")
    data = random_ints(rng, 0, 20)
    k = rng.randint(2, 3)
    # integers and power-of-two windows would be exact; compare rounded values
    exp = [round(sum(data[i:i + k]) / k, 3) for i in range(len(data) - k + 1)]
    return Snippet(fn, code, [("eq", f"[round(x, 3) for x in {fn}({data}, {k})]", lit(exp)),
                              ("eq", f"{fn}([1, 2], 3)", "[]")])


def s_histogram(rng: Rng, st: Style) -> Snippet:
    """Fixed-width histogram bins."""
    fn = rng.choice(("histogram", "bin_counts", "bucketize"))
    seq = rng.choice(SEQ_NAMES)
    width = rng.choice(("width", "bin_width", "step"))
    code = render("""
        def $fn($seq: $ints, $width: int = 10) -> $d:
            $doc
            bins: $d = {}
            for value in $seq:
                start = (value // $width) * $width
                bins[start] = bins.get(start, 0) + 1
            return dict(sorted(bins.items()))
        """, fn=fn, seq=seq, width=width, ints=st.list("int"), d=st.dict("int", "int"),
        doc=docstring(st, "Count values per bin; keys are the bins' lower edges."))
    data = random_ints(rng, 0, 59)
    bins: dict[int, int] = {}
    for v in data:
        bins[(v // 10) * 10] = bins.get((v // 10) * 10, 0) + 1
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(dict(sorted(bins.items()))))])


def s_max_subarray(rng: Rng, st: Style) -> Snippet:
    """Kadane's maximum subarray sum."""
    fn = rng.choice(("max_subarray", "max_subarray_sum", "kadane", "best_run"))
    seq = rng.choice(SEQ_NAMES)
    code = render("""
        def $fn($seq: $ints) -> int:
            $doc
            if not $seq:
                raise ValueError("empty input")
            best = current = $seq[0]
            for value in $seq[1:]:
                # either extend the current run or start a new one here
                current = max(value, current + value)
                best = max(best, current)
            return best
        """, fn=fn, seq=seq, ints=st.list("int"),
        doc=docstring(st, "Return the largest sum of a contiguous, non-empty slice."))
    data = random_ints(rng, -30, 30, 6, 10)
    best = max(sum(data[i:j]) for i in range(len(data)) for j in range(i + 1, len(data) + 1))
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(best)), ("eq", f"{fn}([-3])", "-3")])


def s_two_sum(rng: Rng, st: Style) -> Snippet:
    """Two-sum with a dictionary of seen values."""
    fn = rng.choice(("two_sum", "find_pair", "pair_with_sum"))
    seq = rng.choice(SEQ_NAMES)
    target = rng.choice(("target", "total", "goal"))
    code = render("""
        def $fn($seq: $ints, $target: int) -> $ret:
            $doc
            seen: $d = {}
            for index, value in enumerate($seq):
                other = $target - value
                if other in seen:
                    return seen[other], index
                seen[value] = index
            return None
        """, fn=fn, seq=seq, target=target, ints=st.list("int"), d=st.dict("int", "int"),
        ret=st.opt(st.tuple("int", "int")),
        doc=docstring(st, f"Return indices of two values adding up to {target}, or None."))
    data = list(dict.fromkeys(random_ints(rng, 1, 60, 5, 8)))
    i, j = sorted(rng.sample(range(len(data)), 2))
    t = data[i] + data[j]
    seen: dict[int, int] = {}
    found = None
    for index, value in enumerate(data):
        if t - value in seen:
            found = (seen[t - value], index)
            break
        seen[value] = index
    return Snippet(fn, code, [("eq", f"{fn}({data}, {t})", lit(found)),
                              ("eq", f"{fn}([1, 2], 10)", "None")])


# Text ----------------------------------------------------------------------------------------


def s_word_frequencies(rng: Rng, st: Style) -> Snippet:
    """Word counts with Counter or a plain dict."""
    fn = rng.choice(("word_frequencies", "count_words", "word_counts", "tally_words"))
    text = rng.choice(TEXT_NAMES)
    counts = rng.choice(COUNT_NAMES)
    d = st.dict("str", "int")
    if rng.chance(0.5):
        code = render("""
            def $fn($text: str) -> $d:
                $doc
                words = re.findall(r"[a-z']+", $text.lower())
                return dict(Counter(words))
            """, fn=fn, text=text, d=d, doc=docstring(st, "Count how often each word occurs."))
    else:
        code = render("""
            def $fn($text: str) -> $d:
                $doc
                $counts: $d = {}
                for word in $text.lower().split():
                    word = word.strip(".,!?;:\\"'()")
                    if word:
                        $counts[word] = $counts.get(word, 0) + 1
                return $counts
            """, fn=fn, text=text, counts=counts, d=d,
            doc=docstring(st, "Count words, ignoring case and surrounding punctuation."))
    words = rng.sample(("apple", "river", "stone", "light", "cloud", "green", "table", "paper",
                        "music", "bread", "storm", "quiet"), 4)
    sentence_words = [rng.choice(words) for _ in range(rng.randint(5, 9))]
    sentence = " ".join(sentence_words).capitalize() + "."
    w = sentence_words[0]
    return Snippet(fn, code, [("eq", f'{fn}("{sentence}")["{w}"]', lit(sentence_words.count(w))),
                              ("eq", f'{fn}("")', "{}")])


def s_palindrome(rng: Rng, st: Style) -> Snippet:
    """Palindrome check ignoring case and punctuation."""
    fn = rng.choice(("is_palindrome", "palindrome", "reads_same_backwards"))
    text = rng.choice(TEXT_NAMES)
    code = render("""
        def $fn($text: str) -> bool:
            $doc
            cleaned = [ch.lower() for ch in $text if ch.isalnum()]
            return cleaned == cleaned[::-1]
        """, fn=fn, text=text,
        doc=docstring(st, "Return True if the text reads the same in both directions."))
    yes = rng.choice(("Never odd or even", "Was it a car or a cat I saw?", "Step on no pets",
                      "racecar", "A Santa at NASA", "No lemon, no melon"))
    no = rng.choice(("hello world", "palindrome", "Python", "not even close"))
    return Snippet(fn, code, [("true", f'{fn}("{yes}")'), ("false", f'{fn}("{no}")'),
                              ("true", f'{fn}("")')])


def s_anagrams(rng: Rng, st: Style) -> Snippet:
    """Anagram check and grouping."""
    is_a = rng.choice(("is_anagram", "are_anagrams", "same_letters"))
    grp = rng.choice(("group_anagrams", "anagram_groups", "bucket_anagrams"))
    words = rng.choice(("words", "terms", "tokens"))
    code = render("""
        def $is_a(first: str, second: str) -> bool:
            $doc1
            return sorted(first.replace(" ", "").lower()) == sorted(second.replace(" ", "").lower())
        def $grp($words: $strs) -> $groups:
            $doc2
            groups: $groups = defaultdict(list)
            for word in $words:
                groups["".join(sorted(word))].append(word)
            return dict(groups)
        """, is_a=is_a, grp=grp, words=words, strs=st.list("str"),
        groups=st.dict("str", st.list("str")),
        doc1=docstring(st, "Return True if the two strings use the same letters."),
        doc2=docstring(st, "Group words that are anagrams of each other."))
    pair = rng.choice((("listen", "silent"), ("night", "thing"), ("evil", "vile"),
                       ("state", "taste"), ("dusty", "study")))
    return Snippet(is_a, code, [("true", f'{is_a}("{pair[0]}", "{pair[1]}")'),
                                ("false", f'{is_a}("{pair[0]}", "{pair[0]}s")'),
                                ("eq", f'len({grp}(["{pair[0]}", "{pair[1]}", "other"]))', "2")])


def s_reverse_words(rng: Rng, st: Style) -> Snippet:
    """Reverse word order and capitalise words."""
    rev = rng.choice(("reverse_words", "flip_words", "words_backwards"))
    title = rng.choice(("title_case", "capitalize_words", "headline"))
    text = rng.choice(TEXT_NAMES)
    code = render("""
        def $rev($text: str) -> str:
            $doc1
            return " ".join(reversed($text.split()))
        def $title($text: str) -> str:
            $doc2
            small = {"a", "an", "the", "of", "and", "or", "in", "on"}
            words = $text.lower().split()
            return " ".join(
                w if i > 0 and w in small else w.capitalize() for i, w in enumerate(words)
            )
        """, rev=rev, title=title, text=text,
        doc1=docstring(st, "Return the words of the text in reverse order."),
        doc2=docstring(st, "Capitalize words except short joining words."))
    words = rng.sample(("the", "quick", "fox", "jumps", "over", "lazy", "dog", "river",
                        "bright", "morning"), 4)
    s = " ".join(words)
    small = {"a", "an", "the", "of", "and", "or", "in", "on"}
    t = " ".join(w if i > 0 and w in small else w.capitalize() for i, w in enumerate(words))
    return Snippet(rev, code, [("eq", f'{rev}("{s}")', lit(" ".join(reversed(words)))),
                               ("eq", f'{title}("{s}")', lit(t))])


def s_caesar(rng: Rng, st: Style) -> Snippet:
    """Caesar cipher."""
    enc = rng.choice(("caesar", "shift_letters", "caesar_encrypt", "rotate_text"))
    text = rng.choice(TEXT_NAMES)
    shift = rng.choice(("shift", "key", "offset"))
    code = render("""
        def $enc($text: str, $shift: int) -> str:
            $doc
            chars = []
            for ch in $text:
                if ch.isalpha():
                    base = ord("A") if ch.isupper() else ord("a")
                    chars.append(chr((ord(ch) - base + $shift) % 26 + base))
                else:
                    chars.append(ch)  # keep spaces and punctuation
            return "".join(chars)
        """, enc=enc, text=text, shift=shift,
        doc=docstring(st, "Shift every letter by a fixed amount, wrapping around the alphabet."))
    word = rng.choice(("Hello, World", "attack at dawn", "Python", "zebra crossing"))
    k = rng.randint(1, 25)
    out = "".join(chr((ord(c) - (65 if c.isupper() else 97) + k) % 26 + (65 if c.isupper() else 97))
                  if c.isalpha() else c for c in word)
    return Snippet(enc, code, [("eq", f'{enc}("{word}", {k})', lit(out)),
                               ("eq", f'{enc}({enc}("{word}", {k}), {-k})', lit(word))])


def s_run_length(rng: Rng, st: Style) -> Snippet:
    """Run-length encoding and decoding."""
    enc = rng.choice(("rle_encode", "run_length_encode", "compress"))
    dec = rng.choice(("rle_decode", "run_length_decode", "expand"))
    text = rng.choice(("text", "s", "data"))
    pairs = st.list(st.tuple("str", "int"))
    code = render("""
        def $enc($text: str) -> $pairs:
            $doc1
            runs: $pairs = []
            for ch in $text:
                if runs and runs[-1][0] == ch:
                    runs[-1] = (ch, runs[-1][1] + 1)
                else:
                    runs.append((ch, 1))
            return runs
        def $dec(runs: $pairs) -> str:
            $doc2
            return "".join(ch * count for ch, count in runs)
        """, enc=enc, dec=dec, text=text, pairs=pairs,
        doc1=docstring(st, "Encode a string as (character, count) runs."),
        doc2=docstring(st, "Rebuild the string from its runs."))
    s = "".join(rng.choice("abc") * rng.randint(1, 4) for _ in range(rng.randint(3, 5)))
    runs: list[tuple[str, int]] = []
    for ch in s:
        if runs and runs[-1][0] == ch:
            runs[-1] = (ch, runs[-1][1] + 1)
        else:
            runs.append((ch, 1))
    return Snippet(enc, code, [("eq", f'{enc}("{s}")', lit(runs)),
                               ("eq", f'{dec}({enc}("{s}"))', lit(s)), ("eq", f'{enc}("")', "[]")])


def s_slugify(rng: Rng, st: Style) -> Snippet:
    """URL slugs and camelCase to snake_case."""
    slug = rng.choice(("slugify", "make_slug", "to_slug"))
    snake = rng.choice(("camel_to_snake", "snake_case", "to_snake"))
    text = rng.choice(TEXT_NAMES)
    code = render("""
        def $slug($text: str) -> str:
            $doc1
            $text = $text.strip().lower()
            $text = re.sub(r"[^a-z0-9]+", "-", $text)
            return $text.strip("-")
        def $snake(name: str) -> str:
            $doc2
            name = re.sub(r"(.)([A-Z][a-z]+)", r"\\1_\\2", name)
            return re.sub(r"([a-z0-9])([A-Z])", r"\\1_\\2", name).lower()
        """, slug=slug, snake=snake, text=text,
        doc1=docstring(st, "Turn a title into a lowercase, dash-separated slug."),
        doc2=docstring(st, "Convert CamelCase or camelCase to snake_case."))
    title = rng.choice(("Hello, World!", "  Ten Tips for Better Code ", "What's New in 3.12?",
                        "Data & Models"))
    sl = re.sub(r"[^a-z0-9]+", "-", title.strip().lower()).strip("-")
    camel = rng.choice(("parseHttpResponse", "UserAccount", "getHTTPStatus", "loadConfigFile"))
    sn = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", camel)).lower()
    return Snippet(slug, code, [("eq", f'{slug}("{title}")', lit(sl)),
                                ("eq", f'{snake}("{camel}")', lit(sn))])


def s_vowels(rng: Rng, st: Style) -> Snippet:
    """Count vowels and find the longest word."""
    cv = rng.choice(("count_vowels", "vowel_count", "num_vowels"))
    lw = rng.choice(("longest_word", "find_longest", "max_word"))
    text = rng.choice(TEXT_NAMES)
    code = render("""
        VOWELS = frozenset("aeiou")
        def $cv($text: str) -> int:
            $doc1
            return sum(1 for ch in $text.lower() if ch in VOWELS)
        def $lw($text: str) -> str:
            $doc2
            words = $text.split()
            if not words:
                return ""
            return max(words, key=len)
        """, cv=cv, lw=lw, text=text, doc1=docstring(st, "Return the number of vowels."),
        doc2=docstring(st, "Return the longest word (the first one on ties)."))
    words = rng.sample(("banana", "sky", "umbrella", "tree", "orange", "cat", "window", "idea"), 4)
    s = " ".join(words)
    return Snippet(cv, code, [("eq", f'{cv}("{s}")', lit(sum(1 for c in s if c in "aeiou"))),
                              ("eq", f'{lw}("{s}")', lit(max(words, key=len))),
                              ("eq", f'{lw}("")', "''")])


def s_common_prefix(rng: Rng, st: Style) -> Snippet:
    """Longest common prefix of a list of strings."""
    fn = rng.choice(("common_prefix", "longest_common_prefix", "shared_prefix"))
    words = rng.choice(("words", "strings", "paths", "names"))
    code = render("""
        def $fn($words: $strs) -> str:
            $doc
            if not $words:
                return ""
            prefix = $words[0]
            for word in $words[1:]:
                while not word.startswith(prefix):
                    prefix = prefix[:-1]
                    if not prefix:
                        return ""
            return prefix
        """, fn=fn, words=words, strs=st.list("str"),
        doc=docstring(st, "Return the longest prefix shared by all strings."))
    base = rng.choice(("inter", "pre", "trans", "data_", "test_"))
    ws = [base + rng.choice(("view", "net", "load", "set", "port", "act")) for _ in range(3)]
    return Snippet(fn, code, [("eq", f"{fn}({ws})", lit(os.path.commonprefix(ws))),
                              ("eq", f'{fn}(["abc", "xyz"])', "''"), ("eq", f"{fn}([])", "''")])


def s_edit_distance(rng: Rng, st: Style) -> Snippet:
    """Levenshtein distance with dynamic programming."""
    fn = rng.choice(("levenshtein", "edit_distance", "string_distance"))
    a, b = rng.choice((("a", "b"), ("source", "target"), ("first", "second")))
    code = render("""
        def $fn($a: str, $b: str) -> int:
            $doc
            previous = list(range(len($b) + 1))
            for i, ca in enumerate($a, start=1):
                current = [i]
                for j, cb in enumerate($b, start=1):
                    cost = 0 if ca == cb else 1
                    current.append(min(previous[j] + 1,  # deletion
                                       current[j - 1] + 1,  # insertion
                                       previous[j - 1] + cost))  # substitution
                previous = current
            return previous[-1]
        """, fn=fn, a=a, b=b,
        doc=docstring(st, "Return the minimum number of single-character edits between two strings."))
    pair, dist = rng.choice(((("kitten", "sitting"), 3), (("flaw", "lawn"), 2),
                             (("book", "back"), 2), (("same", "same"), 0), (("", "abc"), 3)))
    return Snippet(fn, code, [("eq", f'{fn}("{pair[0]}", "{pair[1]}")', lit(dist))])


def s_brackets(rng: Rng, st: Style) -> Snippet:
    """Balanced brackets with a stack."""
    fn = rng.choice(("is_balanced", "balanced", "check_brackets"))
    text = rng.choice(TEXT_NAMES)
    code = render("""
        PAIRS = {")": "(", "]": "[", "}": "{"}
        def $fn($text: str) -> bool:
            $doc
            stack = []
            for ch in $text:
                if ch in "([{":
                    stack.append(ch)
                elif ch in PAIRS:
                    if not stack or stack.pop() != PAIRS[ch]:
                        return False
            return not stack
        """, fn=fn, text=text,
        doc=docstring(st, "Return True if every bracket is closed in the right order."))
    good = rng.choice(("(a[b]{c})", "f(x) + [1, 2]", "{[()()]}", "no brackets"))
    bad = rng.choice(("(]", "((a)", "{[}]", "x)"))
    return Snippet(fn, code, [("true", f'{fn}("{good}")'), ("false", f'{fn}("{bad}")')])


def s_parse_config(rng: Rng, st: Style) -> Snippet:
    """Parse key = value lines with comments."""
    fn = rng.choice(("parse_config", "parse_settings", "read_key_values", "parse_env"))
    text = rng.choice(("text", "content", "source"))
    d = st.dict("str", "str")
    code = render("""
        def $fn($text: str) -> $d:
            $doc
            settings: $d = {}
            for number, line in enumerate($text.splitlines(), start=1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue  # blank or comment-only line
                if "=" not in line:
                    raise ValueError(f"line {number}: expected key = value, got {line!r}")
                key, value = line.split("=", 1)
                settings[key.strip()] = value.strip().strip('"')
            return settings
        """, fn=fn, text=text, d=d,
        doc=docstring(st, "Parse 'key = value' lines; '#' starts a comment.",
                      ((text, "the file contents."),), "A dict of the settings."))
    keys = rng.sample(("host", "port", "user", "timeout", "mode", "level", "path", "retries"), 2)
    vals = rng.sample(("localhost", "8080", "admin", "30", "fast", "debug", "/tmp", "3"), 2)
    cfg = f"# settings\\n{keys[0]} = {vals[0]}\\n{keys[1]}={vals[1]}  # note\\n"
    return Snippet(fn, code, [("eq", f'{fn}("{cfg}")', lit({keys[0]: vals[0], keys[1]: vals[1]})),
                              ("raises", "ValueError", f'{fn}("broken line")')])


def s_safe_int(rng: Rng, st: Style) -> Snippet:
    """Parse integers with a default."""
    fn = rng.choice(("safe_int", "parse_int", "to_int", "int_or_default"))
    code = render("""
        def $fn(value: object, default: int = 0) -> int:
            $doc
            try:
                return int(str(value).strip())
            except (TypeError, ValueError):
                return default
        """, fn=fn, doc=docstring(st, "Convert value to int, or return default if that fails."))
    k = rng.randint(-500, 500)
    return Snippet(fn, code, [("eq", f'{fn}(" {k} ")', lit(k)), ("eq", f'{fn}("abc", -1)', "-1"),
                              ("eq", f"{fn}(None)", "0")])


# Collections ---------------------------------------------------------------------------------


def s_flatten(rng: Rng, st: Style) -> Snippet:
    """Flatten nested lists recursively."""
    fn = rng.choice(("flatten", "flatten_list", "deep_flatten"))
    nested = rng.choice(("nested", "items", "tree"))
    res = rng.choice(RESULT_NAMES)
    code = render("""
        def $fn($nested: $anys) -> $anys:
            $doc
            $res = []
            for item in $nested:
                if isinstance(item, list):
                    $res.extend($fn(item))
                else:
                    $res.append(item)
            return $res
        """, fn=fn, nested=nested, res=res, anys=st.list("Any"),
        doc=docstring(st, "Return a flat list of all non-list elements, in order."))
    return Snippet(fn, code, [("eq", f"{fn}([1, [2, [3, 4]], [], 5])", "[1, 2, 3, 4, 5]"),
                              ("eq", f"{fn}([])", "[]")])


def s_chunked(rng: Rng, st: Style) -> Snippet:
    """Split a list into chunks (generator)."""
    fn = rng.choice(("chunked", "batches", "chunks", "split_every"))
    seq = rng.choice(SEQ_NAMES)
    size = rng.choice(("size", "n", "batch_size"))
    code = render("""
        def $fn($seq: $ints, $size: int) -> Iterator[$ints]:
            $doc
            if $size < 1:
                raise ValueError("$size must be at least 1")
            for start in range(0, len($seq), $size):
                yield $seq[start:start + $size]
        """, fn=fn, seq=seq, size=size, ints=st.list("int"),
        doc=docstring(st, f"Yield consecutive slices of length {size} (the last may be shorter)."))
    data = random_ints(rng)
    k = rng.randint(2, 4)
    return Snippet(fn, code, [("eq", f"list({fn}({data}, {k}))",
                               lit([data[i:i + k] for i in range(0, len(data), k)])),
                              ("raises", "ValueError", f"list({fn}([1], 0))")])


def s_unique(rng: Rng, st: Style) -> Snippet:
    """Remove duplicates, keeping order."""
    fn = rng.choice(("unique", "dedupe", "unique_in_order", "remove_duplicates"))
    seq = rng.choice(SEQ_NAMES)
    if rng.chance(0.5):
        body = f"return list(dict.fromkeys({seq}))"
    else:
        res = rng.choice(RESULT_NAMES)
        body = (f"seen = set()\n    {res} = []\n    for x in {seq}:\n"
                f"        if x not in seen:\n            seen.add(x)\n"
                f"            {res}.append(x)\n    return {res}")
    code = render("""
        def $fn($seq: $ints) -> $ints:
            $doc
            $body
        """, fn=fn, seq=seq, ints=st.list("int"), body=body,
        doc=docstring(st, "Return the values without duplicates, keeping first occurrences."))
    data = random_ints(rng, 0, 6, 6, 10)
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(list(dict.fromkeys(data))))])


def s_rotate(rng: Rng, st: Style) -> Snippet:
    """Rotate a list left or right."""
    fn = rng.choice(("rotate", "rotate_list", "shift_list"))
    seq = rng.choice(SEQ_NAMES)
    code = render("""
        def $fn($seq: $ints, steps: int) -> $ints:
            $doc
            if not $seq:
                return []
            steps %= len($seq)
            return $seq[-steps:] + $seq[:-steps] if steps else list($seq)
        """, fn=fn, seq=seq, ints=st.list("int"),
        doc=docstring(st, "Rotate to the right by steps (negative steps rotate left)."))
    data = random_ints(rng)
    k = rng.randint(-3, 7)
    s = k % len(data)
    exp = data[-s:] + data[:-s] if s else list(data)
    return Snippet(fn, code, [("eq", f"{fn}({data}, {k})", lit(exp)), ("eq", f"{fn}([], 2)", "[]")])


def s_transpose(rng: Rng, st: Style) -> Snippet:
    """Matrix transpose and product."""
    tr = rng.choice(("transpose", "transposed", "flip_matrix"))
    mm = rng.choice(("matmul", "matrix_multiply", "mat_mult"))
    a, b = rng.choice((("a", "b"), ("left", "right"), ("m1", "m2")))
    mat = st.list(st.list("float"))
    code = render("""
        Matrix = $mat
        def $tr(matrix: Matrix) -> Matrix:
            $doc1
            return [list(row) for row in zip(*matrix)]
        def $mm($a: Matrix, $b: Matrix) -> Matrix:
            $doc2
            if not $a or len($a[0]) != len($b):
                raise ValueError("incompatible shapes")
            columns = $tr($b)
            return [[sum(x * y for x, y in zip(row, col)) for col in columns] for row in $a]
        """, tr=tr, mm=mm, a=a, b=b, mat=mat,
        doc1=docstring(st, "Swap rows and columns."),
        doc2=docstring(st, "Multiply two matrices given as lists of rows."))
    m = [[rng.randint(0, 9) for _ in range(3)] for _ in range(2)]
    n = [[rng.randint(0, 9) for _ in range(2)] for _ in range(3)]
    prod = [[sum(x * y for x, y in zip(row, col)) for col in zip(*n)] for row in m]
    return Snippet(tr, code, [("eq", f"{tr}({m})", lit([list(r) for r in zip(*m)])),
                              ("eq", f"{mm}({m}, {n})", lit(prod)),
                              ("raises", "ValueError", f"{mm}({m}, {m})")])


def s_merge_intervals(rng: Rng, st: Style) -> Snippet:
    """Merge overlapping intervals."""
    fn = rng.choice(("merge_intervals", "merge_ranges", "coalesce"))
    iv = rng.choice(("intervals", "ranges", "spans"))
    pairs = st.list(st.tuple("int", "int"))
    code = render("""
        def $fn($iv: $pairs) -> $pairs:
            $doc
            merged: $pairs = []
            for start, end in sorted($iv):
                if merged and start <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], end))
                else:
                    merged.append((start, end))
            return merged
        """, fn=fn, iv=iv, pairs=pairs,
        doc=docstring(st, "Merge overlapping (start, end) intervals."))
    data = []
    for _ in range(rng.randint(3, 5)):
        s = rng.randint(0, 30)
        data.append((s, s + rng.randint(1, 8)))
    merged: list[tuple[int, int]] = []
    for s, e in sorted(data):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return Snippet(fn, code, [("eq", f"{fn}({data})", lit(merged))])


def s_dict_tools(rng: Rng, st: Style) -> Snippet:
    """Invert a dict and flatten nested dicts."""
    inv = rng.choice(("invert", "invert_dict", "swap_keys_values"))
    flat = rng.choice(("flatten_dict", "flatten_keys", "dotted"))
    sep = rng.choice((".", "/", "_"))
    code = render("""
        def $inv(mapping: $d1) -> $d2:
            $doc1
            inverted: $d2 = {}
            for key, value in mapping.items():
                inverted.setdefault(value, []).append(key)
            return inverted
        def $flat(nested: $d3, prefix: str = "") -> $d3:
            $doc2
            flat: $d3 = {}
            for key, value in nested.items():
                name = f"{prefix}$sep{key}" if prefix else key
                if isinstance(value, dict):
                    flat.update($flat(value, name))
                else:
                    flat[name] = value
            return flat
        """, inv=inv, flat=flat, sep=sep, d1=st.dict("str", "int"),
        d2=st.dict("int", st.list("str")), d3=st.dict("str", "Any"),
        doc1=docstring(st, "Map each value to the list of keys that had it."),
        doc2=docstring(st, f"Flatten nested dicts into '{sep}'-joined keys."))
    return Snippet(inv, code, [
        ("eq", f'{inv}({{"a": 1, "b": 2, "c": 1}})', "{1: ['a', 'c'], 2: ['b']}"),
        ("eq", f'{flat}({{"db": {{"host": "x", "port": 5}}, "debug": True}})',
         lit({f"db{sep}host": "x", f"db{sep}port": 5, "debug": True}))])


def s_deep_merge(rng: Rng, st: Style) -> Snippet:
    """Recursively merge configuration dicts."""
    fn = rng.choice(("deep_merge", "merge_config", "merge_settings"))
    base, over = rng.choice((("base", "override"), ("defaults", "overrides"), ("left", "right")))
    d = st.dict("str", "Any")
    code = render("""
        def $fn($base: $d, $over: $d) -> $d:
            $doc
            merged = dict($base)
            for key, value in $over.items():
                if isinstance(value, dict) and isinstance(merged.get(key), dict):
                    merged[key] = $fn(merged[key], value)
                else:
                    merged[key] = value
            return merged
        """, fn=fn, base=base, over=over, d=d,
        doc=docstring(st, f"Return {base} updated with {over}; nested dicts are merged, not replaced."))
    return Snippet(fn, code, [
        ("eq", f'{fn}({{"a": 1, "b": {{"x": 1, "y": 2}}}}, {{"b": {{"y": 3}}, "c": 4}})',
         "{'a': 1, 'b': {'x': 1, 'y': 3}, 'c': 4}"),
        ("eq", f"{fn}({{}}, {{}})", "{}")])


def s_running(rng: Rng, st: Style) -> Snippet:
    """Running totals and pairwise differences with itertools."""
    run = rng.choice(("running_total", "cumulative_sum", "prefix_sums"))
    diff = rng.choice(("differences", "deltas", "pairwise_diff"))
    seq = rng.choice(SEQ_NAMES)
    ints = st.list("int")
    code = render("""
        def $run($seq: $ints) -> $ints:
            $doc1
            return list(itertools.accumulate($seq))
        def $diff($seq: $ints) -> $ints:
            $doc2
            return [b - a for a, b in zip($seq, $seq[1:])]
        """, run=run, diff=diff, seq=seq, ints=ints,
        doc1=docstring(st, "Return the running totals."),
        doc2=docstring(st, "Return the differences between neighbours."))
    data = random_ints(rng, -9, 20)
    acc, tot = [], 0
    for x in data:
        tot += x
        acc.append(tot)
    return Snippet(run, code, [("eq", f"{run}({data})", lit(acc)),
                               ("eq", f"{diff}({data})", lit([b - a for a, b in zip(data, data[1:])]))])


# Graphs --------------------------------------------------------------------------------------


def s_bfs(rng: Rng, st: Style) -> Snippet:
    """Breadth-first shortest path in an unweighted graph."""
    fn = rng.choice(("shortest_path", "bfs_path", "find_route"))
    graph = rng.choice(("graph", "adjacency", "edges"))
    code = render("""
        def $fn($graph: $g, start: str, goal: str) -> $ret:
            $doc
            previous: $p = {start: None}
            queue = deque([start])
            while queue:
                node = queue.popleft()
                if node == goal:
                    path = []
                    while node is not None:
                        path.append(node)
                        node = previous[node]
                    return path[::-1]
                for neighbour in $graph.get(node, []):
                    if neighbour not in previous:
                        previous[neighbour] = node
                        queue.append(neighbour)
            return None
        """, fn=fn, graph=graph, g=st.dict("str", st.list("str")), ret=st.opt(st.list("str")),
        p=st.dict("str", st.opt("str")),
        doc=docstring(st, "Return the shortest path from start to goal, or None if unreachable.",
                      ((graph, "adjacency lists."), ("start", "first node."), ("goal", "last node.")),
                      "The list of nodes on the path."))
    nodes = rng.sample(("a", "b", "c", "d", "e", "f"), 4)
    g = {nodes[0]: [nodes[1], nodes[2]], nodes[1]: [nodes[3]], nodes[2]: [nodes[3]], nodes[3]: []}
    return Snippet(fn, code, [("eq", f'{fn}({g}, "{nodes[0]}", "{nodes[3]}")',
                               lit([nodes[0], nodes[1], nodes[3]])),
                              ("eq", f'{fn}({g}, "{nodes[3]}", "{nodes[0]}")', "None")])


def s_dijkstra(rng: Rng, st: Style) -> Snippet:
    """Dijkstra's algorithm with heapq."""
    fn = rng.choice(("dijkstra", "shortest_distances", "path_costs"))
    graph = rng.choice(("graph", "roads", "network"))
    code = render("""
        def $fn($graph: $g, source: str) -> $d:
            $doc
            dist: $d = {source: 0.0}
            heap = [(0.0, source)]
            while heap:
                cost, node = heapq.heappop(heap)
                if cost > dist.get(node, math.inf):
                    continue  # stale entry
                for neighbour, weight in $graph.get(node, {}).items():
                    candidate = cost + weight
                    if candidate < dist.get(neighbour, math.inf):
                        dist[neighbour] = candidate
                        heapq.heappush(heap, (candidate, neighbour))
            return dist
        """, fn=fn, graph=graph, g=st.dict("str", st.dict("str", "float")), d=st.dict("str", "float"),
        doc=docstring(st, "Return the cost of the cheapest path from source to every reachable node."))
    w = [rng.randint(1, 9) for _ in range(4)]
    g = {"a": {"b": w[0], "c": w[1]}, "b": {"c": w[2]}, "c": {"d": w[3]}}
    c = min(w[1], w[0] + w[2])
    return Snippet(fn, code, [("eq", f'{fn}({g}, "a")["d"]', lit(float(c + w[3]))),
                              ("eq", f'{fn}({g}, "d")', "{'d': 0.0}")])


# Files and tooling -----------------------------------------------------------------------------


def s_file_lines(rng: Rng, st: Style) -> Snippet:
    """Read non-empty lines and count lines per file."""
    rd = rng.choice(("read_lines", "load_lines", "nonempty_lines"))
    cnt = rng.choice(("count_lines", "line_counts", "lines_per_file"))
    suffix = rng.choice((".py", ".txt", ".md", ".csv"))
    code = render("""
        def $rd(path: str) -> $strs:
            $doc1
            with open(path, encoding="utf-8") as handle:
                return [line.rstrip("\\n") for line in handle if line.strip()]
        def $cnt(root: str, suffix: str = "$suffix") -> $d:
            $doc2
            counts: $d = {}
            for file in sorted(Path(root).rglob(f"*{suffix}")):
                with file.open(encoding="utf-8", errors="replace") as handle:
                    counts[str(file)] = sum(1 for _ in handle)
            return counts
        """, rd=rd, cnt=cnt, suffix=suffix, strs=st.list("str"), d=st.dict("str", "int"),
        doc1=docstring(st, "Return the non-blank lines of a text file without newlines."),
        doc2=docstring(st, f"Count lines in every *{suffix} file below root."))
    checks = [("stmt", "with tempfile.TemporaryDirectory() as tmp:"),
              ("stmt", f'    target = os.path.join(tmp, "sample{suffix}")'),
              ("stmt", '    with open(target, "w", encoding="utf-8") as handle:'),
              ("stmt", '        handle.write("one\\n\\ntwo\\n")'),
              ("stmt", f"    lines = {rd}(target)"),
              ("stmt", f"    counts = {cnt}(tmp)"),
              ("eq", "lines", "['one', 'two']"), ("eq", "list(counts.values())", "[3]")]
    return Snippet(rd, code, checks)


def s_json_atomic(rng: Rng, st: Style) -> Snippet:
    """Write JSON atomically and read it back with a default."""
    save = rng.choice(("save_json", "write_json", "dump_state"))
    load = rng.choice(("load_json", "read_json", "load_state"))
    code = render("""
        def $save(path: str, payload: $d) -> None:
            $doc1
            directory = os.path.dirname(os.path.abspath(path))
            fd, tmp_path = tempfile.mkstemp(dir=directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle, indent=2, sort_keys=True)
                os.replace(tmp_path, path)
            except BaseException:
                os.unlink(tmp_path)
                raise
        def $load(path: str, default: $od = None) -> $d:
            $doc2
            try:
                with open(path, encoding="utf-8") as handle:
                    return json.load(handle)
            except FileNotFoundError:
                return dict(default or {})
        """, save=save, load=load, d=st.dict("str", "Any"), od=st.opt(st.dict("str", "Any")),
        doc1=docstring(st, "Write payload as JSON through a temporary file, so readers never see half a file."),
        doc2=docstring(st, "Read a JSON object, or return default when the file does not exist."))
    key = rng.choice(("count", "version", "retries", "size"))
    val = rng.randint(1, 99)
    checks = [("stmt", "with tempfile.TemporaryDirectory() as tmp:"),
              ("stmt", '    target = os.path.join(tmp, "state.json")'),
              ("stmt", f'    {save}(target, {{"{key}": {val}}})'),
              ("stmt", f"    loaded = {load}(target)"),
              ("stmt", f'    missing = {load}(os.path.join(tmp, "nope.json"), {{"a": 1}})'),
              ("eq", "loaded", lit({key: val})), ("eq", "missing", "{'a': 1}")]
    return Snippet(save, code, checks)


def s_retry(rng: Rng, st: Style) -> Snippet:
    """A retry decorator with backoff."""
    fn = rng.choice(("retry", "with_retries", "retrying"))
    attempts = rng.choice(("attempts", "tries", "max_attempts"))
    code = render("""
        def $fn($attempts: int = 3, delay: float = 0.0, exceptions: tuple = (Exception,)) -> Callable:
            $doc
            def decorator(func: Callable) -> Callable:
                @wraps(func)
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    for attempt in range(1, $attempts + 1):
                        try:
                            return func(*args, **kwargs)
                        except exceptions as exc:
                            if attempt == $attempts:
                                raise
                            logger.info("attempt %d of %s failed: %s", attempt, func.__name__, exc)
                            time.sleep(delay * 2 ** (attempt - 1))
                return wrapper
            return decorator
        """, fn=fn, attempts=attempts,
        doc=docstring(st, "Retry the decorated function when it raises one of exceptions."))
    n = rng.randint(2, 3)
    checks = [("stmt", "calls = []"),
              ("stmt", f"@{fn}({n})"),
              ("stmt", "def flaky() -> str:"),
              ("stmt", "    calls.append(1)"),
              ("stmt", f"    if len(calls) < {n}:"),
              ("stmt", '        raise RuntimeError("not yet")'),
              ("stmt", '    return "ok"'),
              ("eq", "flaky()", "'ok'"), ("eq", "len(calls)", lit(n))]
    return Snippet(fn, code, checks)


def s_timer(rng: Rng, st: Style) -> Snippet:
    """A timing context manager."""
    fn = rng.choice(("timed", "timer", "measure", "stopwatch"))
    label = rng.choice(("label", "name", "what"))
    code = render("""
        @contextmanager
        def $fn($label: str) -> Iterator[$d]:
            $doc
            result = {"seconds": 0.0}
            start = time.perf_counter()
            try:
                yield result
            finally:
                result["seconds"] = time.perf_counter() - start
                logger.debug("%s took %.3f s", $label, result["seconds"])
        """, fn=fn, label=label, d=st.dict("str", "float"),
        doc=docstring(st, "Measure the time spent in the block; the yielded dict gets 'seconds'."))
    checks = [("stmt", f'with {fn}("sum") as info:'), ("stmt", "    total = sum(range(1000))"),
              ("eq", "total", "499500"), ("true", 'info["seconds"] >= 0')]
    return Snippet(fn, code, checks)


SNIPPET_THEMES: dict[str, tuple[Callable[[Rng, Style], Snippet], ...]] = {
    "sorting": (s_binary_search, s_simple_sort, s_merge_sort, s_quick_sort, s_top_k),
    "numbers": (s_gcd, s_primes, s_fibonacci, s_factorial, s_prime_factors, s_digits, s_roman,
                s_temperature, s_clamp),
    "stats": (s_mean_std, s_median, s_moving_average, s_histogram, s_max_subarray, s_running),
    "text": (s_word_frequencies, s_palindrome, s_anagrams, s_reverse_words, s_caesar,
             s_run_length, s_slugify, s_vowels, s_common_prefix, s_edit_distance, s_brackets),
    "collections": (s_flatten, s_chunked, s_unique, s_rotate, s_transpose, s_merge_intervals,
                    s_dict_tools, s_deep_merge, s_two_sum),
    "graphs": (s_bfs, s_dijkstra, s_merge_intervals, s_two_sum),
    "io": (s_file_lines, s_json_atomic, s_parse_config, s_safe_int),
    "tooling": (s_retry, s_timer, s_safe_int, s_parse_config),
}
THEME_MODULES = {
    "sorting": (("sorting", "sort_utils", "search", "algorithms"),
                ("Sorting and searching helpers.", "Classic sorting and searching algorithms.",
                 "Small, dependency-free sorting routines.")),
    "numbers": (("numbers", "mathutils", "number_theory", "numeric"),
                ("Small number-theory and arithmetic helpers.", "Integer utilities.",
                 "Arithmetic helpers used across the project.")),
    "stats": (("stats", "statistics_utils", "metrics", "summary"),
              ("Descriptive statistics without third-party dependencies.",
               "Helpers for summarising numeric series.", "Basic statistics on lists of numbers.")),
    "text": (("text_utils", "strings", "text_tools", "wordplay"),
             ("String manipulation helpers.", "Utilities for working with text.",
              "Small text-processing functions.")),
    "collections": (("collections_utils", "listtools", "seqtools", "helpers"),
                    ("Helpers for lists and dicts.", "Utilities for sequences and mappings.",
                     "Small collection helpers.")),
    "graphs": (("graphs", "routing", "paths"),
               ("Graph search algorithms.", "Shortest paths on small graphs.",
                "Path finding helpers.")),
    "io": (("fileio", "storage", "config", "io_utils"),
           ("File and configuration helpers.", "Reading and writing files safely.",
            "Input and output helpers.")),
    "tooling": (("decorators", "runtime", "timing", "resilience"),
                ("Decorators and context managers for robust code.", "Runtime helpers.",
                 "Retry and timing utilities.")),
}
PACKAGE_DIRS = ("app", "tools", "lib", "utils", "core", "scripts", "src/shelf", "src/ledger",
               "src/tracker", "pkg", "common", "services")



# Classes -------------------------------------------------------------------------------------


def s_stack(rng: Rng, st: Style) -> Snippet:
    """A stack backed by a list."""
    cls = rng.choice(("Stack", "LifoStack", "ItemStack"))
    items = rng.choice(("_items", "_data", "_elements"))
    code = render('''
        class $cls:
            $doc
            def __init__(self) -> None:
                self.$items: $anys = []
            def push(self, item: Any) -> None:
                """Put an item on top."""
                self.$items.append(item)
            def pop(self) -> Any:
                """Remove and return the top item."""
                if not self.$items:
                    raise IndexError("pop from an empty stack")
                return self.$items.pop()
            def peek(self) -> Any:
                """Return the top item without removing it."""
                if not self.$items:
                    raise IndexError("peek at an empty stack")
                return self.$items[-1]
            def __len__(self) -> int:
                return len(self.$items)
            def __bool__(self) -> bool:
                return bool(self.$items)
        ''', cls=cls, items=items, anys=st.list("Any"),
        doc=docstring(st, "Last-in, first-out container."))
    a, b = rng.randint(1, 50), rng.randint(51, 99)
    return Snippet(cls.lower(), code, [
        ("stmt", f"stack = {cls}()"), ("stmt", f"stack.push({a})"), ("stmt", f"stack.push({b})"),
        ("eq", "stack.peek()", lit(b)), ("eq", "stack.pop()", lit(b)), ("eq", "len(stack)", "1"),
        ("eq", "stack.pop()", lit(a)), ("false", "stack"), ("raises", "IndexError", "stack.pop()")])


def s_queue(rng: Rng, st: Style) -> Snippet:
    """A bounded FIFO queue backed by deque."""
    cls = rng.choice(("BoundedQueue", "RingBuffer", "RecentItems"))
    cap = rng.choice(("capacity", "maxlen", "limit"))
    code = render('''
        class $cls:
            $doc
            def __init__(self, $cap: int) -> None:
                if $cap <= 0:
                    raise ValueError("$cap must be positive")
                self.$cap = $cap
                self._queue: deque = deque(maxlen=$cap)
            def put(self, item: Any) -> None:
                """Add an item, dropping the oldest one when full."""
                self._queue.append(item)
            def get(self) -> Any:
                """Remove and return the oldest item."""
                if not self._queue:
                    raise IndexError("queue is empty")
                return self._queue.popleft()
            def is_full(self) -> bool:
                """Return True when the queue holds $cap items."""
                return len(self._queue) == self.$cap
            def __len__(self) -> int:
                return len(self._queue)
            def __repr__(self) -> str:
                return f"$cls({list(self._queue)!r}, $cap={self.$cap})"
        ''', cls=cls, cap=cap, doc=docstring(st, "First-in, first-out queue that keeps the newest items."))
    n = rng.randint(2, 4)
    vals = random_ints(rng, 0, 99, n + 2, n + 3)
    kept = vals[-n:]
    checks = [("stmt", f"queue = {cls}({n})")]
    checks += [("stmt", f"queue.put({v})") for v in vals]
    checks += [("true", "queue.is_full()"), ("eq", "queue.get()", lit(kept[0])),
               ("eq", "len(queue)", lit(n - 1)), ("raises", "ValueError", f"{cls}(0)")]
    return Snippet(cls.lower(), code, checks)


def s_linked_list(rng: Rng, st: Style) -> Snippet:
    """A singly linked list with append, iteration and reversal."""
    cls = rng.choice(("LinkedList", "SinglyLinkedList", "Chain"))
    node = rng.choice(("Node", "_Node", "Link"))
    code = render('''
        @dataclass
        class $node:
            value: Any
            next: $onode = None
        class $cls:
            $doc
            def __init__(self, values: Iterable[Any] = ()) -> None:
                self.head: $onode = None
                self._size = 0
                for value in values:
                    self.append(value)
            def append(self, value: Any) -> None:
                """Add a value at the end (O(n))."""
                new = $node(value)
                if self.head is None:
                    self.head = new
                else:
                    current = self.head
                    while current.next is not None:
                        current = current.next
                    current.next = new
                self._size += 1
            def reverse(self) -> None:
                """Reverse the list in place."""
                previous = None
                current = self.head
                while current is not None:
                    current.next, previous, current = previous, current, current.next
                self.head = previous
            def __iter__(self) -> Iterator[Any]:
                current = self.head
                while current is not None:
                    yield current.value
                    current = current.next
            def __len__(self) -> int:
                return self._size
        ''', cls=cls, node=node, onode=st.opt_ref(node),
        doc=docstring(st, "A minimal singly linked list."))
    vals = random_ints(rng, 0, 9, 3, 6)
    return Snippet(cls.lower(), code, [
        ("stmt", f"chain = {cls}({vals})"), ("eq", "list(chain)", lit(vals)),
        ("stmt", "chain.reverse()"), ("eq", "list(chain)", lit(vals[::-1])),
        ("eq", "len(chain)", lit(len(vals)))])


def s_bst(rng: Rng, st: Style) -> Snippet:
    """A binary search tree of integers."""
    cls = rng.choice(("BinarySearchTree", "BST", "SortedTree"))
    code = render('''
        class $cls:
            $doc
            def __init__(self) -> None:
                self.root: $otree = None
            def insert(self, key: int) -> None:
                """Insert a key (duplicates are ignored)."""
                if self.root is None:
                    self.root = _Tree(key)
                    return
                node = self.root
                while True:
                    if key == node.key:
                        return
                    side = "left" if key < node.key else "right"
                    child = getattr(node, side)
                    if child is None:
                        setattr(node, side, _Tree(key))
                        return
                    node = child
            def __contains__(self, key: int) -> bool:
                node = self.root
                while node is not None:
                    if key == node.key:
                        return True
                    node = node.left if key < node.key else node.right
                return False
            def inorder(self) -> $ints:
                """Return the keys in ascending order."""
                out: $ints = []
                def walk(node: $otree) -> None:
                    if node is not None:
                        walk(node.left)
                        out.append(node.key)
                        walk(node.right)
                walk(self.root)
                return out
        @dataclass
        class _Tree:
            key: int
            left: $otree = None
            right: $otree = None
        ''', cls=cls, otree=st.opt_ref("_Tree"), ints=st.list("int"),
        doc=docstring(st, "Unbalanced binary search tree."))
    vals = random_ints(rng, 0, 99, 5, 9)
    absent = next(v for v in range(100) if v not in vals)
    checks = [("stmt", f"tree = {cls}()"), ("stmt", f"for key in {vals}:"),
              ("stmt", "    tree.insert(key)"), ("eq", "tree.inorder()", lit(sorted(set(vals)))),
              ("true", f"{vals[0]} in tree"), ("false", f"{absent} in tree")]
    return Snippet(cls.lower(), code, checks)


def s_lru(rng: Rng, st: Style) -> Snippet:
    """An LRU cache on OrderedDict."""
    cls = rng.choice(("LRUCache", "LruCache", "RecentCache"))
    code = render('''
        class $cls:
            $doc
            def __init__(self, capacity: int = 128) -> None:
                self.capacity = capacity
                self._data: OrderedDict = OrderedDict()
                self.hits = 0
                self.misses = 0
            def get(self, key: str, default: Any = None) -> Any:
                """Return the cached value and mark it as recently used."""
                if key not in self._data:
                    self.misses += 1
                    return default
                self.hits += 1
                self._data.move_to_end(key)
                return self._data[key]
            def put(self, key: str, value: Any) -> None:
                """Store a value, evicting the least recently used entry when full."""
                self._data[key] = value
                self._data.move_to_end(key)
                if len(self._data) > self.capacity:
                    self._data.popitem(last=False)
            def __len__(self) -> int:
                return len(self._data)
        ''', cls=cls, doc=docstring(st, "Fixed-size cache that forgets the least recently used key."))
    return Snippet(cls.lower(), code, [
        ("stmt", f"cache = {cls}(2)"), ("stmt", 'cache.put("a", 1)'), ("stmt", 'cache.put("b", 2)'),
        ("eq", 'cache.get("a")', "1"), ("stmt", 'cache.put("c", 3)'),
        ("eq", 'cache.get("b")', "None"), ("eq", "(cache.hits, cache.misses)", "(1, 1)"),
        ("eq", "len(cache)", "2")])


def s_bank_account(rng: Rng, st: Style) -> Snippet:
    """A bank account with a custom exception."""
    cls = rng.choice(("Account", "BankAccount", "Wallet"))
    exc = rng.choice(("InsufficientFunds", "InsufficientFundsError", "BalanceError"))
    owner = rng.choice(("Ana", "Bruno", "Chen", "Dara", "Emil", "Farah"))
    code = render('''
        class $exc(Exception):
            """Raised when a withdrawal exceeds the balance."""
        class $cls:
            $doc
            def __init__(self, owner: str, balance: float = 0.0) -> None:
                self.owner = owner
                self.balance = balance
                self.history: $hist = []
            def deposit(self, amount: float) -> float:
                """Add money and return the new balance."""
                if amount <= 0:
                    raise ValueError("deposit must be positive")
                self.balance += amount
                self.history.append(("deposit", amount))
                return self.balance
            def withdraw(self, amount: float) -> float:
                """Take money out and return the new balance."""
                if amount > self.balance:
                    raise $exc(f"cannot withdraw {amount:.2f}, balance is {self.balance:.2f}")
                self.balance -= amount
                self.history.append(("withdraw", amount))
                return self.balance
            def __str__(self) -> str:
                return f"{self.owner}: {self.balance:,.2f}"
        ''', cls=cls, exc=exc, hist=st.list(st.tuple("str", "float")),
        doc=docstring(st, "A simple account that records every operation."))
    d, w = rng.randint(50, 500), rng.randint(1, 49)
    return Snippet(cls.lower(), code, [
        ("stmt", f'account = {cls}("{owner}")'), ("eq", f"account.deposit({d})", lit(float(d))),
        ("eq", f"account.withdraw({w})", lit(float(d - w))),
        ("raises", exc, f"account.withdraw({d * 10})"),
        ("eq", "len(account.history)", "2"), ("raises", "ValueError", "account.deposit(0)")])


def s_vector(rng: Rng, st: Style) -> Snippet:
    """A 2-D vector dataclass with operators."""
    cls = rng.choice(("Vector", "Vec2", "Point"))
    code = render('''
        @dataclass(frozen=True)
        class $cls:
            $doc
            x: float
            y: float
            def __add__(self, other: "$cls") -> "$cls":
                return $cls(self.x + other.x, self.y + other.y)
            def __sub__(self, other: "$cls") -> "$cls":
                return $cls(self.x - other.x, self.y - other.y)
            def __mul__(self, factor: float) -> "$cls":
                return $cls(self.x * factor, self.y * factor)
            def dot(self, other: "$cls") -> float:
                """Return the dot product."""
                return self.x * other.x + self.y * other.y
            def length(self) -> float:
                """Return the Euclidean length."""
                return math.hypot(self.x, self.y)
        ''', cls=cls, doc=docstring(st, "An immutable 2-D vector."))
    a = (rng.randint(-9, 9), rng.randint(-9, 9))
    b = (rng.randint(-9, 9), rng.randint(-9, 9))
    return Snippet(cls.lower(), code, [
        ("eq", f"{cls}{a} + {cls}{b}", f"{cls}({a[0] + b[0]}, {a[1] + b[1]})"),
        ("eq", f"{cls}{a}.dot({cls}{b})", lit(a[0] * b[0] + a[1] * b[1])),
        ("eq", f"{cls}(3, 4).length()", "5.0"), ("eq", f"{cls}(1, 2) * 3", f"{cls}(3, 6)")])


def s_event_bus(rng: Rng, st: Style) -> Snippet:
    """A publish/subscribe event bus."""
    cls = rng.choice(("EventBus", "Dispatcher", "Signals"))
    sub = rng.choice(("subscribe", "on", "connect"))
    pub = rng.choice(("publish", "emit", "send"))
    code = render('''
        class $cls:
            $doc
            def __init__(self) -> None:
                self._handlers: $h = defaultdict(list)
            def $sub(self, event: str, handler: Callable[..., None]) -> None:
                """Register handler for event."""
                self._handlers[event].append(handler)
            def $pub(self, event: str, *args: Any) -> int:
                """Call every handler of event; return how many ran."""
                handlers = self._handlers.get(event, [])
                for handler in handlers:
                    try:
                        handler(*args)
                    except Exception:  # one broken handler must not stop the others
                        logger.exception("handler for %r failed", event)
                return len(handlers)
        ''', cls=cls, sub=sub, pub=pub, h=st.dict("str", st.list("Callable[..., None]")),
        doc=docstring(st, "Routes named events to the functions subscribed to them."))
    ev = rng.choice(("saved", "opened", "tick", "closed"))
    return Snippet(cls.lower(), code, [
        ("stmt", f"bus = {cls}()"), ("stmt", "seen = []"),
        ("stmt", f'bus.{sub}("{ev}", seen.append)'),
        ("eq", f'bus.{pub}("{ev}", 42)', "1"), ("eq", f'bus.{pub}("unknown")', "0"),
        ("eq", "seen", "[42]")])


def s_todo(rng: Rng, st: Style) -> Snippet:
    """A todo list with an Enum status."""
    cls = rng.choice(("TodoList", "TaskBoard", "Checklist"))
    status = rng.choice(("Status", "State", "Progress"))
    code = render('''
        class $status(Enum):
            TODO = "todo"
            DOING = "doing"
            DONE = "done"
        class $cls:
            $doc
            def __init__(self) -> None:
                self._tasks: $d = {}
            def add(self, title: str) -> None:
                """Add a task in the TODO state."""
                if title in self._tasks:
                    raise ValueError(f"duplicate task: {title}")
                self._tasks[title] = $status.TODO
            def move(self, title: str, state: $status) -> None:
                """Change the state of a task."""
                if title not in self._tasks:
                    raise KeyError(title)
                self._tasks[title] = state
            def by_state(self, state: $status) -> $strs:
                """Return the titles in the given state, sorted."""
                return sorted(t for t, s in self._tasks.items() if s is state)
            def progress(self) -> float:
                """Return the fraction of tasks that are done."""
                if not self._tasks:
                    return 0.0
                done = sum(1 for s in self._tasks.values() if s is $status.DONE)
                return done / len(self._tasks)
        ''', cls=cls, status=status, d=st.dict("str", status), strs=st.list("str"),
        doc=docstring(st, "Tasks with a title and a state."))
    tasks = rng.sample(("write docs", "fix bug", "review", "deploy", "plan sprint", "test"), 4)
    return Snippet(cls.lower(), code, [
        ("stmt", f"board = {cls}()"), ("stmt", f"for title in {tasks}:"),
        ("stmt", "    board.add(title)"), ("stmt", f'board.move("{tasks[1]}", {status}.DONE)'),
        ("eq", "board.progress()", "0.25"), ("eq", f"board.by_state({status}.DONE)", lit([tasks[1]])),
        ("raises", "KeyError", f'board.move("missing", {status}.DOING)'),
        ("raises", "ValueError", f'board.add("{tasks[0]}")')])


def s_cart(rng: Rng, st: Style) -> Snippet:
    """A shopping cart with discounts."""
    cls = rng.choice(("Cart", "ShoppingCart", "Basket"))
    code = render('''
        @dataclass
        class LineItem:
            name: str
            price: float
            quantity: int = 1
            @property
            def subtotal(self) -> float:
                return self.price * self.quantity
        @dataclass
        class $cls:
            $doc
            items: $items = field(default_factory=list)
            discount: float = 0.0  # fraction, e.g. 0.1 for 10 %
            def add(self, name: str, price: float, quantity: int = 1) -> None:
                """Add a product, merging with an existing line of the same name."""
                for item in self.items:
                    if item.name == name:
                        item.quantity += quantity
                        return
                self.items.append(LineItem(name, price, quantity))
            def total(self) -> float:
                """Return the total after the discount, rounded to cents."""
                gross = sum(item.subtotal for item in self.items)
                return round(gross * (1 - self.discount), 2)
        ''', cls=cls, items=st.list("LineItem"),
        doc=docstring(st, "Items a customer is about to buy."))
    p1, p2 = rng.randint(1, 40), rng.randint(1, 40)
    q = rng.randint(1, 4)
    disc = rng.choice((0.0, 0.1, 0.25, 0.5))
    return Snippet(cls.lower(), code, [
        ("stmt", f"cart = {cls}(discount={disc})"), ("stmt", f'cart.add("pen", {p1})'),
        ("stmt", f'cart.add("book", {p2}, {q})'), ("stmt", 'cart.add("pen", ' + f"{p1})"),
        ("eq", "len(cart.items)", "2"),
        ("eq", "cart.total()", lit(round((p1 * 2 + p2 * q) * (1 - disc), 2)))])


CLASS_SNIPPETS = (s_stack, s_queue, s_linked_list, s_bst, s_lru, s_bank_account, s_vector,
                  s_event_bus, s_todo, s_cart)
CLASS_MODULES = ("structures", "containers", "models", "accounts", "datatypes", "core", "objects")


# Record-oriented modules -----------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """A kind of record that a generated module works with, plus sample rows for its tests."""

    singular: str
    plural: str
    cls: str
    fields: tuple[tuple[str, str], ...]  # (name, type) with type in str, int, float, bool
    group: str  # a text field to group and filter by
    number: str  # a numeric field to sum, average and rank by
    topic: str  # what the records describe, for docstrings
    rows: tuple[tuple, ...]


DOMAINS = (
    Domain("book", "books", "Book",
           (("title", "str"), ("author", "str"), ("year", "int"), ("pages", "int"),
            ("rating", "float")), "author", "pages", "a library catalogue",
           (("The Silent Harbor", "Ada Lane", 1998, 320, 4.2),
            ("Winter Garden", "Ada Lane", 2004, 288, 3.9),
            ("Paper Moons", "Ravi Shah", 2011, 412, 4.6),
            ("Glass Rivers", "Mila Fox", 2019, 256, 4.1))),
    Domain("order", "orders", "Order",
           (("order_id", "int"), ("customer", "str"), ("total", "float"), ("items", "int"),
            ("status", "str")), "customer", "total", "customer orders of a web shop",
           ((1001, "acme", 249.5, 3, "shipped"), (1002, "globex", 80.0, 1, "pending"),
            (1003, "acme", 12.75, 2, "shipped"), (1004, "initech", 530.25, 7, "cancelled"))),
    Domain("student", "students", "Student",
           (("name", "str"), ("grade", "int"), ("score", "float"), ("school", "str")),
           "school", "score", "student exam results",
           (("Ana", 9, 88.5, "North High"), ("Ben", 10, 72.0, "North High"),
            ("Chloe", 9, 95.25, "Lakeside"), ("Dev", 11, 64.5, "Lakeside"))),
    Domain("employee", "employees", "Employee",
           (("name", "str"), ("department", "str"), ("salary", "float"), ("age", "int")),
           "department", "salary", "staff records",
           (("Iris", "engineering", 98000.0, 34), ("Omar", "sales", 61000.0, 41),
            ("Lena", "engineering", 105000.0, 29), ("Paul", "support", 48000.0, 52))),
    Domain("reading", "readings", "Reading",
           (("sensor_id", "str"), ("location", "str"), ("value", "float"), ("timestamp", "int")),
           "location", "value", "sensor measurements",
           (("t-01", "kitchen", 21.5, 1700000000), ("t-02", "garage", 14.25, 1700000060),
            ("t-03", "kitchen", 22.0, 1700000120), ("h-07", "attic", 31.75, 1700000180))),
    Domain("product", "products", "Product",
           (("sku", "str"), ("name", "str"), ("category", "str"), ("price", "float"),
            ("stock", "int")), "category", "price", "a product catalogue",
           (("SKU-1", "desk lamp", "lighting", 24.99, 12),
            ("SKU-2", "floor lamp", "lighting", 79.5, 3),
            ("SKU-3", "oak chair", "furniture", 120.0, 0), ("SKU-4", "rug", "decor", 45.0, 8))),
    Domain("task", "tasks", "Task",
           (("task_id", "int"), ("title", "str"), ("owner", "str"), ("priority", "int"),
            ("done", "bool")), "owner", "priority", "project tasks",
           ((1, "write spec", "maria", 2, True), (2, "build parser", "li", 1, False),
            (3, "add tests", "maria", 3, False), (4, "release", "sam", 1, False))),
    Domain("city", "cities", "City",
           (("name", "str"), ("country", "str"), ("population", "int"), ("area", "float")),
           "country", "population", "city statistics",
           (("Riverton", "Avalon", 120000, 45.5), ("Hillcrest", "Avalon", 56000, 22.0),
            ("Porto Verde", "Meridia", 310000, 98.25), ("Lowmoor", "Meridia", 8000, 5.5))),
    Domain("song", "songs", "Song",
           (("title", "str"), ("artist", "str"), ("duration", "float"), ("plays", "int")),
           "artist", "plays", "a music library",
           (("Blue Hour", "The Lanterns", 215.0, 1520), ("Static", "The Lanterns", 187.5, 980),
            ("Northbound", "Kay Rivers", 242.0, 3100), ("Echoes", "Mono Park", 199.0, 45))),
    Domain("transaction", "transactions", "Transaction",
           (("tx_id", "int"), ("account", "str"), ("amount", "float"), ("currency", "str")),
           "account", "amount", "bank transactions",
           ((1, "checking", -42.5, "EUR"), (2, "savings", 500.0, "EUR"),
            (3, "checking", 1200.0, "EUR"), (4, "checking", -15.25, "EUR"))),
    Domain("movie", "movies", "Movie",
           (("title", "str"), ("director", "str"), ("year", "int"), ("minutes", "int"),
            ("score", "float")), "director", "minutes", "a film collection",
           (("Harbor Lights", "J. Moreau", 1987, 112, 7.8),
            ("The Long Road", "J. Moreau", 1994, 134, 8.1),
            ("Quiet Storm", "A. Okafor", 2015, 98, 6.9), ("Sunfall", "R. Tanaka", 2021, 121, 7.4))),
    Domain("ticket", "tickets", "Ticket",
           (("ticket_id", "int"), ("reporter", "str"), ("component", "str"), ("severity", "int"),
            ("hours", "float")), "component", "hours", "support tickets",
           ((501, "kim", "api", 2, 3.5), (502, "raj", "ui", 1, 1.0), (503, "kim", "api", 3, 8.25),
            (504, "eve", "db", 2, 4.0))),
    Domain("trip", "trips", "Trip",
           (("trip_id", "int"), ("driver", "str"), ("city", "str"), ("distance", "float"),
            ("minutes", "int")), "driver", "distance", "taxi trips",
           ((1, "noor", "Riverton", 12.4, 25), (2, "alex", "Riverton", 3.1, 9),
            (3, "noor", "Hillcrest", 27.9, 41), (4, "jo", "Riverton", 8.0, 17))),
    Domain("recipe", "recipes", "Recipe",
           (("name", "str"), ("cuisine", "str"), ("minutes", "int"), ("servings", "int"),
            ("calories", "float")), "cuisine", "calories", "a recipe box",
           (("lentil soup", "turkish", 45, 4, 320.0), ("pad thai", "thai", 30, 2, 610.5),
            ("menemen", "turkish", 20, 2, 410.0), ("green curry", "thai", 40, 4, 520.25))),
)


def field_type(dom: Domain, name: str) -> str:
    """The type of one field of a domain."""
    return dict(dom.fields)[name]


def convert_expr(name: str, kind: str, src: str) -> str:
    """An expression turning the text src[name] into a value of the field's type."""
    if kind == "str":
        return f'{src}["{name}"].strip()'
    if kind == "bool":
        return f'{src}["{name}"].strip().lower() in ("1", "true", "yes")'
    return f'{kind}({src}["{name}"])'


def record_ctor(dom: Domain, src: str, indent: str) -> str:
    """A multi-line constructor call building a record from a dict of strings."""
    args = [f"{indent}    {name}={convert_expr(name, kind, src)}," for name, kind in dom.fields]
    return f"{dom.cls}(\n" + "\n".join(args) + f"\n{indent})"


def sample_literal(dom: Domain) -> str:
    """Source text of the sample records used in tests."""
    rows = [f"    {dom.cls}({', '.join(lit(v) for v in row)})," for row in dom.rows]
    return f"SAMPLE = [\n" + "\n".join(rows) + "\n]"


def d_record(rng: Rng, st: Style, dom: Domain, kind: str) -> Snippet:
    """The record class: a dataclass, a NamedTuple or a plain class with __slots__."""
    doc = docstring(st, f"One entry of {dom.topic}.")
    fields = "\n".join(f"    {name}: {kind_}" for name, kind_ in dom.fields)
    negative = any(row[[n for n, _ in dom.fields].index(dom.number)] < 0 for row in dom.rows)
    if kind == "dataclass":
        deco = rng.choice(("@dataclass", "@dataclass(frozen=True)", "@dataclass(order=True)"))
        code = f"{deco}\nclass {dom.cls}:\n    {doc}\n{fields}"
        if not negative and rng.chance(0.6):
            code += "\n" + textwrap.indent(render('''
                def __post_init__(self) -> None:
                    if self.$n < 0:
                        raise ValueError(f"$n must not be negative, got {self.$n}")
                ''', n=dom.number), "    ")
    elif kind == "namedtuple":
        code = f"class {dom.cls}(NamedTuple):\n    {doc}\n{fields}"
    else:
        names = [n for n, _ in dom.fields]
        params = ", ".join(f"{n}: {k}" for n, k in dom.fields)
        assigns = "\n".join(f"        self.{n} = {n}" for n in names)
        reprs = ", ".join(f"{n}={{self.{n}!r}}" for n in names)
        tuple_self = ", ".join(f"self.{n}" for n in names)
        tuple_other = ", ".join(f"other.{n}" for n in names)
        slots = ", ".join(f'"{n}"' for n in names)
        code = (f"class {dom.cls}:\n    {doc}\n    __slots__ = ({slots})\n"
                f"    def __init__(self, {params}) -> None:\n{assigns}\n"
                f"    def __repr__(self) -> str:\n        return f\"{dom.cls}({reprs})\"\n"
                f"    def __eq__(self, other: object) -> bool:\n"
                f"        if not isinstance(other, {dom.cls}):\n            return NotImplemented\n"
                f"        return ({tuple_self}) == ({tuple_other})")
    first = dom.rows[0]
    return Snippet(dom.singular, code, [
        ("eq", f"SAMPLE[0].{dom.fields[0][0]}", lit(first[0])),
        ("true", f"SAMPLE[0] == {dom.cls}({', '.join(lit(v) for v in first)})")])


def d_load_csv(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Read records from CSV, logging or raising on bad rows."""
    fn = rng.choice((f"load_{dom.plural}", f"read_{dom.plural}", f"{dom.plural}_from_csv"))
    out = rng.choice(("records", dom.plural, "rows", "loaded"))
    strict = rng.chance(0.4)
    handler = ('raise ValueError(f"{path}:{line_no}: bad row: {exc}") from exc' if strict else
               'logger.warning("skipping line %d of %s: %s", line_no, path, exc)')
    code = render('''
        def $fn(path: str) -> $lst:
            $doc
            $out: $lst = []
            with open(path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                for line_no, row in enumerate(reader, start=2):
                    try:
                        $out.append($ctor)
                    except (KeyError, ValueError) as exc:
                        $handler
            return $out
        ''', fn=fn, out=out, lst=st.list(dom.cls), handler=handler,
        ctor=record_ctor(dom, "row", " " * 16),
        doc=docstring(st, f"Read {dom.plural} from a CSV file with a header row.",
                      (("path", "the CSV file."),), f"The {dom.plural} in file order."))
    header = ",".join(n for n, _ in dom.fields)
    lines = [",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in row)
             for row in dom.rows]
    csv_text = "\\n".join([header] + lines) + "\\n"
    checks = [("stmt", "with tempfile.TemporaryDirectory() as tmp:"),
              ("stmt", f'    path = os.path.join(tmp, "{dom.plural}.csv")'),
              ("stmt", '    with open(path, "w", encoding="utf-8") as handle:'),
              ("stmt", f'        handle.write("{csv_text}")'),
              ("stmt", f"    loaded = {fn}(path)"), ("eq", "loaded", "SAMPLE")]
    return Snippet(fn, code, checks, entry=fn)


def d_save_json(rng: Rng, st: Style, dom: Domain, kind: str) -> Snippet:
    """Write records to JSON and read them back."""
    save = rng.choice((f"save_{dom.plural}", f"write_{dom.plural}", f"dump_{dom.plural}"))
    load = rng.choice((f"load_{dom.plural}_json", f"read_{dom.plural}_json"))
    var = rng.choice(("records", dom.plural, "entries"))
    if kind == "dataclass":
        to_dict = "[asdict(r) for r in $var]"
    elif kind == "namedtuple":
        to_dict = "[r._asdict() for r in $var]"
    else:
        to_dict = "[{" + ", ".join(f'"{n}": r.{n}' for n, _ in dom.fields) + "} for r in $var]"
    code = render('''
        def $save($var: Iterable[$cls], path: str) -> int:
            $doc1
            payload = $to_dict
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(payload, handle, indent=2)
            return len(payload)
        def $load(path: str) -> $lst:
            $doc2
            with open(path, encoding="utf-8") as handle:
                return [$cls(**item) for item in json.load(handle)]
        ''', save=save, load=load, var=var, cls=dom.cls, lst=st.list(dom.cls),
        to_dict=to_dict.replace("$var", var),
        doc1=docstring(st, f"Write {dom.plural} to a JSON file; return how many were written."),
        doc2=docstring(st, f"Read {dom.plural} written by {save}."))
    checks = [("stmt", "with tempfile.TemporaryDirectory() as tmp:"),
              ("stmt", f'    path = os.path.join(tmp, "{dom.plural}.json")'),
              ("stmt", f"    written = {save}(SAMPLE, path)"),
              ("stmt", f"    restored = {load}(path)"),
              ("eq", "written", lit(len(dom.rows))), ("eq", "restored", "SAMPLE")]
    return Snippet(save, code, checks)


def numbers_of(dom: Domain, name: str) -> list:
    """The sample values of one field."""
    index = [n for n, _ in dom.fields].index(name)
    return [row[index] for row in dom.rows]


def d_totals(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Sum and average of the numeric field."""
    n = dom.number
    total = rng.choice((f"total_{n}", f"sum_{n}", f"{n}_total"))
    avg = rng.choice((f"average_{n}", f"mean_{n}", f"{n}_average"))
    var = rng.choice(("records", dom.plural, "items"))
    kind = field_type(dom, n)
    code = render('''
        def $total($var: Iterable[$cls]) -> $kind:
            $doc1
            return sum(r.$n for r in $var)
        def $avg($var: Sequence[$cls]) -> float:
            $doc2
            if not $var:
                raise ValueError("cannot average an empty list of $plural")
            return $total($var) / len($var)
        ''', total=total, avg=avg, var=var, cls=dom.cls, kind=kind, n=n, plural=dom.plural,
        doc1=docstring(st, f"Return the sum of {n} over all {dom.plural}."),
        doc2=docstring(st, f"Return the mean {n} of the {dom.plural}."))
    values = numbers_of(dom, n)
    return Snippet(total, code, [("eq", f"round({total}(SAMPLE), 2)", lit(round(sum(values), 2))),
                                 ("eq", f"round({avg}(SAMPLE), 2)",
                                  lit(round(sum(values) / len(values), 2))),
                                 ("raises", "ValueError", f"{avg}([])")])


def d_group_by(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Group records by a text field."""
    g = dom.group
    fn = rng.choice((f"group_by_{g}", f"{dom.plural}_by_{g}", f"index_by_{g}"))
    var = rng.choice(("records", dom.plural, "items"))
    groups = st.dict("str", st.list(dom.cls))
    if rng.chance(0.5):
        body = (f"groups: {groups} = defaultdict(list)\n    for r in {var}:\n"
                f"        groups[r.{g}].append(r)\n    return dict(groups)")
    else:
        body = (f"groups: {groups} = {{}}\n    for r in {var}:\n"
                f"        groups.setdefault(r.{g}, []).append(r)\n    return groups")
    code = render('''
        def $fn($var: Iterable[$cls]) -> $groups:
            $doc
            $body
        ''', fn=fn, var=var, cls=dom.cls, groups=groups, body=body,
        doc=docstring(st, f"Group {dom.plural} by {g}, keeping their order inside each group."))
    keys = list(dict.fromkeys(numbers_of(dom, g)))
    sizes = [numbers_of(dom, g).count(k) for k in keys]
    return Snippet(fn, code, [("eq", f"sorted({fn}(SAMPLE))", lit(sorted(keys))),
                              ("eq", f'len({fn}(SAMPLE)["{keys[0]}"])', lit(sizes[0]))])


def d_top_n(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """The records with the largest numeric field."""
    n = dom.number
    fn = rng.choice((f"top_{dom.plural}", f"top_by_{n}", f"largest_{dom.plural}"))
    var = rng.choice(("records", dom.plural, "items"))
    if rng.chance(0.5):
        body = f"return sorted({var}, key=lambda r: r.{n}, reverse=True)[:count]"
    else:
        body = f"return heapq.nlargest(count, {var}, key=attrgetter(\"{n}\"))"
    code = render('''
        def $fn($var: Iterable[$cls], count: int = 3) -> $lst:
            $doc
            $body
        ''', fn=fn, var=var, cls=dom.cls, lst=st.list(dom.cls), body=body,
        doc=docstring(st, f"Return the count {dom.plural} with the largest {n}."))
    values = numbers_of(dom, n)
    best = max(range(len(values)), key=lambda i: values[i])
    return Snippet(fn, code, [("eq", f"{fn}(SAMPLE, 1)", f"[SAMPLE[{best}]]"),
                              ("eq", f"len({fn}(SAMPLE, 10))", lit(len(values)))])


def d_filter(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Filter records by group value and by a numeric threshold."""
    g, n = dom.group, dom.number
    by = rng.choice((f"filter_by_{g}", f"{dom.plural}_for_{g}", f"select_{g}"))
    above = rng.choice((f"{dom.plural}_above", f"with_{n}_over", f"filter_{n}"))
    var = rng.choice(("records", dom.plural, "items"))
    code = render('''
        def $by($var: Iterable[$cls], $g: str) -> $lst:
            $doc1
            wanted = $g.casefold()
            return [r for r in $var if r.$g.casefold() == wanted]
        def $above($var: Iterable[$cls], threshold: float) -> $lst:
            $doc2
            return [r for r in $var if r.$n > threshold]
        ''', by=by, above=above, var=var, cls=dom.cls, lst=st.list(dom.cls), g=g, n=n,
        doc1=docstring(st, f"Return the {dom.plural} whose {g} matches, ignoring case."),
        doc2=docstring(st, f"Return the {dom.plural} with {n} above threshold."))
    groups = numbers_of(dom, g)
    values = numbers_of(dom, n)
    key = groups[0]
    thr = sorted(values)[1]
    return Snippet(by, code, [
        ("eq", f'len({by}(SAMPLE, "{key.upper()}"))', lit(groups.count(key))),
        ("eq", f"len({above}(SAMPLE, {thr!r}))", lit(sum(1 for v in values if v > thr)))])


def d_summary(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Descriptive statistics with the statistics module."""
    n = dom.number
    fn = rng.choice((f"summarize_{dom.plural}", f"{n}_summary", f"describe_{dom.plural}"))
    var = rng.choice(("records", dom.plural, "items"))
    code = render('''
        def $fn($var: Sequence[$cls]) -> $d:
            $doc
            values = [r.$n for r in $var]
            if not values:
                return {"count": 0}
            return {
                "count": len(values),
                "min": min(values),
                "max": max(values),
                "mean": round(statistics.fmean(values), 2),
                "median": statistics.median(values),
                "stdev": round(statistics.pstdev(values), 2),
            }
        ''', fn=fn, var=var, cls=dom.cls, n=n, d=st.dict("str", "float"),
        doc=docstring(st, f"Return count, min, max, mean, median and spread of {n}."))
    values = numbers_of(dom, n)
    return Snippet(fn, code, [("eq", f'{fn}(SAMPLE)["count"]', lit(len(values))),
                              ("eq", f'{fn}(SAMPLE)["max"]', lit(max(values))),
                              ("eq", f"{fn}([])", "{'count': 0}")])


def d_report(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Format one record per line and print a report table."""
    first = next(n for n, k in dom.fields if k == "str")
    g, n = dom.group, dom.number
    fmt = rng.choice((f"format_{dom.singular}", f"{dom.singular}_line", f"describe_{dom.singular}"))
    rep = rng.choice(("print_report", f"print_{dom.plural}", "render_table", "report"))
    w1, w2 = rng.choice((20, 24, 28)), rng.choice((12, 14, 16))
    num_fmt = ".2f" if field_type(dom, n) == "float" else "d"
    code = render('''
        def $fmt(r: $cls) -> str:
            $doc1
            return f"{r.$first:<$w1} {r.$g:<$w2} {r.$n:>10$num_fmt}"
        def $rep($var: Sequence[$cls], title: str = "$title") -> str:
            $doc2
            lines = [title, "=" * len(title)]
            lines.extend($fmt(r) for r in $var)
            total = sum(r.$n for r in $var)
            lines.append(f"{len($var)} $plural, $n total {total:$num_fmt}")
            text = "\\n".join(lines)
            print(text)
            return text
        ''', fmt=fmt, rep=rep, cls=dom.cls, first=first, g=g, n=n, w1=w1, w2=w2,
        num_fmt=num_fmt, var=rng.choice(("records", dom.plural)), plural=dom.plural,
        title=dom.topic.capitalize(),
        doc1=docstring(st, f"Return one aligned report line for {article(dom.singular)}."),
        doc2=docstring(st, f"Print a table of {dom.plural} and return its text."))
    row = dom.rows[0]
    vals = dict(zip([nm for nm, _ in dom.fields], row))
    line = f"{vals[first]:<{w1}} {vals[g]:<{w2}} {vals[n]:>10{num_fmt}}"
    return Snippet(fmt, code, [("eq", f"{fmt}(SAMPLE[0])", lit(line)),
                               ("true", f'{rep}(SAMPLE).endswith("{len(dom.rows)} {dom.plural}, '
                                        f'{n} total {sum(numbers_of(dom, n)):{num_fmt}}")')],
                   entry=rep)


def d_repository(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """An in-memory repository keyed by the first field."""
    key, kt = dom.fields[0]
    cls = rng.choice((f"{dom.cls}Repository", f"{dom.cls}Store", f"{dom.cls}Registry"))
    code = render('''
        class $cls:
            $doc
            def __init__(self) -> None:
                self._by_key: $d = {}
            def add(self, record: $rec) -> None:
                """Store a record; its $key must be new."""
                if record.$key in self._by_key:
                    raise KeyError(f"duplicate $key: {record.$key!r}")
                self._by_key[record.$key] = record
            def get(self, $key: $kt) -> $orec:
                """Return the record with this $key, or None."""
                return self._by_key.get($key)
            def remove(self, $key: $kt) -> $rec:
                """Remove and return a record; KeyError if it is missing."""
                try:
                    return self._by_key.pop($key)
                except KeyError:
                    raise KeyError(f"no $singular with $key {$key!r}") from None
            def all(self) -> $lst:
                """Return every record in insertion order."""
                return list(self._by_key.values())
            def __len__(self) -> int:
                return len(self._by_key)
            def __contains__(self, $key: object) -> bool:
                return $key in self._by_key
        ''', cls=cls, key=key, kt=kt, rec=dom.cls, orec=st.opt(dom.cls), lst=st.list(dom.cls),
        d=st.dict(kt, dom.cls), singular=dom.singular,
        doc=docstring(st, f"Keeps {dom.plural} in memory, indexed by {key}."))
    k0 = dom.rows[0][0]
    return Snippet(cls.lower(), code, [
        ("stmt", f"repo = {cls}()"), ("stmt", "for record in SAMPLE:"), ("stmt", "    repo.add(record)"),
        ("eq", "len(repo)", lit(len(dom.rows))), ("eq", f"repo.get({k0!r})", "SAMPLE[0]"),
        ("raises", "KeyError", "repo.add(SAMPLE[0])"), ("eq", f"repo.remove({k0!r})", "SAMPLE[0]"),
        ("false", f"{k0!r} in repo")])


def d_validate(rng: Rng, st: Style, dom: Domain) -> Snippet:
    """Collect validation problems of a record as messages."""
    fn = rng.choice((f"validate_{dom.singular}", f"check_{dom.singular}", f"{dom.singular}_errors"))
    lines = []
    for name, kind in dom.fields:
        if kind == "str":
            lines.append(f'    if not r.{name}.strip():\n        errors.append("{name} is empty")')
        elif kind in ("int", "float") and name == dom.number and min(numbers_of(dom, name)) >= 0:
            lines.append(f'    if r.{name} < 0:\n        errors.append(f"{name} is negative: {{r.{name}}}")')
    code = (f"def {fn}(r: {dom.cls}) -> {st.list('str')}:\n    "
            + docstring(st, f"Return a list of problems with {article(dom.singular)}; empty if it is valid.")
            + f"\n    errors: {st.list('str')} = []\n" + "\n".join(lines) + "\n    return errors")
    return Snippet(fn, code, [("eq", f"{fn}(SAMPLE[0])", "[]")])


def d_main(rng: Rng, st: Style, dom: Domain, load: str, report: str) -> str:
    """A command-line entry point built on a loader and a report function."""
    return render('''
        def main(argv: $oargs = None) -> int:
            $doc
            parser = argparse.ArgumentParser(description="Summarize $topic.")
            parser.add_argument("path", help="CSV file with one $singular per row")
            parser.add_argument("--limit", type=int, default=0, help="show at most this many rows")
            args = parser.parse_args(argv)
            try:
                records = $load(args.path)
            except OSError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            if args.limit:
                records = records[: args.limit]
            $report(records)
            return 0
        if __name__ == "__main__":
            sys.exit(main())
        ''', oargs=st.opt(st.list("str")), topic=dom.topic, singular=dom.singular, load=load,
        report=report, doc=docstring(st, "Command-line entry point."))


# Module assembly -----------------------------------------------------------------------------

IMPORT_RULES: tuple[tuple[str, str, str], ...] = (
    # (pattern, module, name): name "" means "import module"
    (r"json\.", "json", ""), (r"csv\.", "csv", ""), (r"re\.", "re", ""),
    (r"math\.", "math", ""), (r"statistics\.", "statistics", ""), (r"os\.", "os", ""),
    (r"sys\.", "sys", ""), (r"logging\.", "logging", ""), (r"logger\.", "logging", ""),
    (r"heapq\.", "heapq", ""),
    (r"itertools\.", "itertools", ""), (r"time\.", "time", ""),
    (r"tempfile\.", "tempfile", ""), (r"unittest\.", "unittest", ""),
    (r"argparse\.", "argparse", ""), (r"pytest\.", "pytest", ""),
    (r"defaultdict\(", "collections", "defaultdict"), (r"Counter\(", "collections", "Counter"),
    (r"deque\b", "collections", "deque"), (r"OrderedDict\b", "collections", "OrderedDict"),
    (r"@dataclass", "dataclasses", "dataclass"), (r"field\(", "dataclasses", "field"),
    (r"asdict\(", "dataclasses", "asdict"), (r"@lru_cache", "functools", "lru_cache"),
    (r"@wraps", "functools", "wraps"), (r"reduce\(", "functools", "reduce"),
    (r"@contextmanager", "contextlib", "contextmanager"), (r"Path\(", "pathlib", "Path"),
    (r"\(Enum\)", "enum", "Enum"), (r"attrgetter\(", "operator", "attrgetter"),
    (r"Any\b", "typing", "Any"), (r"Callable\b", "typing", "Callable"),
    (r"Dict\[", "typing", "Dict"), (r"Iterable\[", "typing", "Iterable"),
    (r"Iterator\[", "typing", "Iterator"), (r"List\[", "typing", "List"),
    (r"\(NamedTuple\)", "typing", "NamedTuple"), (r"Optional\[", "typing", "Optional"),
    (r"Sequence\[", "typing", "Sequence"), (r"Tuple\[", "typing", "Tuple"),
)
THIRD_PARTY = ("pytest",)


def import_block(code: str) -> list[str]:
    """Import lines for the modules and names the code uses (stdlib first, isort order)."""
    plain: set[str] = set()
    names: dict[str, set[str]] = {}
    for pattern, module, name in IMPORT_RULES:
        prefix = r"(?<![\w.])" if pattern[0].isalpha() else ""  # not an attribute or suffix
        suffix = "(?=[A-Za-z_])" if pattern.endswith(".") else ""  # "json.dump", not "json."
        if re.search(prefix + pattern + suffix, code):
            if name:
                names.setdefault(module, set()).add(name)
            else:
                plain.add(module)
    std = [f"import {m}" for m in sorted(plain) if m not in THIRD_PARTY]
    std += [f"from {m} import {', '.join(sorted(names[m]))}" for m in sorted(names)]
    third = [f"import {m}" for m in sorted(plain) if m in THIRD_PARTY]
    return std + third


def render_checks(checks: list[tuple[str, ...]], framework: str, indent: str) -> list[str]:
    """Turn checks into test statements for pytest or unittest."""
    lines = []
    for check in checks:
        kind = check[0]
        if kind == "stmt":
            lines.append(indent + check[1])
        elif kind == "eq":
            lines.append(indent + (f"assert {check[1]} == {check[2]}" if framework == "pytest"
                                   else f"self.assertEqual({check[1]}, {check[2]})"))
        elif kind == "true":
            lines.append(indent + (f"assert {check[1]}" if framework == "pytest"
                                   else f"self.assertTrue({check[1]})"))
        elif kind == "false":
            lines.append(indent + (f"assert not {check[1]}" if framework == "pytest"
                                   else f"self.assertFalse({check[1]})"))
        elif kind == "raises":
            opener = (f"with pytest.raises({check[1]}):" if framework == "pytest"
                      else f"with self.assertRaises({check[1]}):")
            lines += [indent + opener, indent + "    " + check[2]]
        else:
            raise ValueError(f"unknown check kind {kind!r}")
    return lines


def render_tests(snippets: list[Snippet], st: Style, suite: str) -> list[str]:
    """Test functions (pytest) or one TestCase class (unittest) as top-level blocks."""
    tested = [s for s in snippets if s.checks]
    if st.tests == "pytest":
        return [f"def test_{s.name}() -> None:\n"
                + "\n".join(render_checks(s.checks, "pytest", "    ")) for s in tested]
    methods = [f"    def test_{s.name}(self) -> None:\n"
               + "\n".join(render_checks(s.checks, "unittest", "        ")) for s in tested]
    return [f"class Test{suite}(unittest.TestCase):\n" + "\n".join(methods),
            'if __name__ == "__main__":\n    unittest.main()']


def camel(name: str) -> str:
    """snake_case to CamelCase."""
    return "".join(part.capitalize() for part in name.split("_"))


def top_level_names(code: str) -> list[str]:
    """Names of the functions, classes and constants a module defines."""
    out = []
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


def assemble(path: str, doc: str, blocks: list[str], pep8: bool, future: bool = False,
             extra_imports: tuple[str, ...] = ()) -> str:
    """Build one file: header comment, docstring, imports, logger and the blocks."""
    code = "\n".join(blocks)
    header = [f"# file: {path}", f'"""{doc}"""']
    imports = (["from __future__ import annotations"] if future else []) + import_block(code)
    imports += list(extra_imports)
    if re.search(r"(?<![\w.])logger\.", code):
        blocks = ["logger = logging.getLogger(__name__)"] + blocks
    if pep8:
        text = "\n".join(header) + "\n\n" + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(blocks)
    else:
        text = "\n".join(header + imports + blocks)
    text += "\n"
    try:
        ast.parse(text)
        compile(text, path, "exec", dont_inherit=True)  # also checks __future__ placement etc.
    except SyntaxError as exc:
        raise RuntimeError(f"generated invalid Python for {path}: {exc}\n{text}") from exc
    return text


def module_path(rng: Rng, stem: str) -> tuple[str, str]:
    """A file path and its dotted import name."""
    directory = rng.choice(PACKAGE_DIRS)
    package = directory[4:] if directory.startswith("src/") else directory
    return f"{directory}/{stem}.py", f"{package.replace('/', '.')}.{stem}"


def split_tests(rng: Rng, st: Style, module: str, import_name: str, test_blocks: list[str],
                defined: list[str], pep8: bool, setup: list[str]) -> str:
    """A separate test file importing what it uses from the module under test."""
    text = "\n".join(setup + test_blocks)
    used = [n for n in defined if re.search(rf"(?<![\w.]){re.escape(n)}\b", text)]
    directory = module.rsplit("/", 1)[0]
    stem = module.rsplit("/", 1)[1][:-3]
    path = f"tests/test_{stem}.py" if rng.chance(0.6) else f"{directory}/test_{stem}.py"
    line = f"from {import_name} import {', '.join(used)}"
    if len(line) > 99:
        line = f"from {import_name} import (\n" + "".join(f"    {n},\n" for n in used) + ")"
    return assemble(path, f"Tests for {import_name}.", setup + test_blocks, pep8,
                    extra_imports=(line,))


def make_style(rng: Rng) -> Style:
    """Pick the conventions of one file."""
    return Style(typing_module=rng.chance(0.35),
                 doc=rng.choice(("line", "line", "google", "sphinx")),
                 tests=rng.choice(("pytest", "pytest", "unittest")))


def theme_module(rng: Rng, pep8: bool) -> list[str]:
    """A module of related helper functions, with tests inline, in a test file, or none."""
    st = make_style(rng)
    theme = rng.choice(tuple(SNIPPET_THEMES))
    makers = rng.sample(SNIPPET_THEMES[theme], min(rng.randint(2, 4), len(SNIPPET_THEMES[theme])))
    snippets = [make(rng, st) for make in makers]
    stems, docs = THEME_MODULES[theme]
    path, import_name = module_path(rng, rng.choice(stems))
    blocks = [s.code for s in snippets]
    return finish_module(rng, st, path, import_name, rng.choice(docs), blocks, snippets, pep8, [])


def class_module(rng: Rng, pep8: bool) -> list[str]:
    """A module with one or two small classes."""
    st = make_style(rng)
    makers = rng.sample(CLASS_SNIPPETS, rng.choice((1, 1, 2)))
    snippets = [make(rng, st) for make in makers]
    path, import_name = module_path(rng, rng.choice(CLASS_MODULES))
    doc = rng.choice(("Small data structures.", "Core classes.", "Domain objects and helpers.",
                      "Reusable container classes."))
    blocks = [s.code for s in snippets]
    return finish_module(rng, st, path, import_name, doc, blocks, snippets, pep8, [])


def domain_module(rng: Rng, pep8: bool) -> list[str]:
    """A module around one record type: loading, saving, aggregating, reporting."""
    st = make_style(rng)
    dom = rng.choice(DOMAINS)
    kind = rng.choice(("dataclass", "dataclass", "namedtuple", "plain"))
    record = d_record(rng, st, dom, kind)
    options = [lambda: d_load_csv(rng, st, dom), lambda: d_save_json(rng, st, dom, kind),
               lambda: d_totals(rng, st, dom), lambda: d_group_by(rng, st, dom),
               lambda: d_top_n(rng, st, dom), lambda: d_filter(rng, st, dom),
               lambda: d_summary(rng, st, dom), lambda: d_report(rng, st, dom),
               lambda: d_repository(rng, st, dom), lambda: d_validate(rng, st, dom)]
    picked = sorted(rng.sample(range(len(options)), rng.randint(2, 5)))
    with_main = rng.chance(0.3)
    if with_main:
        picked = sorted(set(picked) | {0, 7})
    snippets = [record] + [options[i]() for i in picked]
    blocks = [s.code for s in snippets]
    if with_main:
        load = snippets[1 + picked.index(0)].entry  # d_load_csv
        report = snippets[1 + picked.index(7)].entry  # d_report
        blocks.append(d_main(rng, st, dom, load, report))
    stem = rng.choice((dom.plural, f"{dom.singular}_stats", f"{dom.singular}_store",
                       f"{dom.plural}_report", f"{dom.singular}_utils"))
    path, import_name = module_path(rng, stem)
    doc = rng.choice((f"Helpers for {dom.topic}.", f"Load, query and summarize {dom.topic}.",
                      f"{dom.cls} records and the functions that work on them."))
    return finish_module(rng, st, path, import_name, doc, blocks, snippets, pep8,
                         [sample_literal(dom)], future=rng.chance(0.3))


def finish_module(rng: Rng, st: Style, path: str, import_name: str, doc: str, blocks: list[str],
                  snippets: list[Snippet], pep8: bool, test_setup: list[str],
                  future: bool = False) -> list[str]:
    """Add tests (inline, separate file or none) or a small demo, and render the file(s)."""
    stem = path.rsplit("/", 1)[1][:-3]
    where = rng.choice(("inline", "inline", "separate", "none"))
    has_main = any('__name__ == "__main__"' in b for b in blocks)
    if rng.chance(0.2):
        names = [n for n in top_level_names("\n".join(blocks)) if not n.startswith("_")
                 and n != "main" and not n.isupper()]
        blocks = [f"__all__ = {names!r}".replace("'", '"')] + blocks
    tests = render_tests(snippets, st, camel(stem))
    if where == "inline" and not has_main:
        return [assemble(path, doc, blocks + test_setup + tests, pep8, future)]
    if where == "separate" or (where == "inline" and has_main):
        module = assemble(path, doc, blocks, pep8, future)
        defined = top_level_names("\n".join(blocks))
        return [module, split_tests(rng, st, path, import_name, tests, defined, pep8, test_setup)]
    demo = next((s.checks[0] for s in snippets if s.checks and s.checks[0][0] == "eq"
                 and all(c[0] != "stmt" for c in s.checks) and "SAMPLE" not in s.checks[0][1]),
                None)
    if demo is not None and not has_main:
        blocks = blocks + [f'if __name__ == "__main__":\n    print({demo[1]})']
    return [assemble(path, doc, blocks, pep8, future)]


def generate_code_file_groups(rng: Rng, pep8: bool) -> list[str]:
    """One or two files (a module and possibly its tests)."""
    roll = rng.below(100)
    if roll < 45:
        return theme_module(rng, pep8)
    if roll < 65:
        return class_module(rng, pep8)
    return domain_module(rng, pep8)


def generate_code(seed: int, target_bytes: int) -> list[str]:
    """Return Python files (compact: no blank lines inside a file) until target_bytes."""
    rng = Rng(seed)
    files: list[str] = []
    seen: set[str] = set()
    size = 0
    while size < target_bytes:
        for text in generate_code_file_groups(rng, pep8=False):
            if text in seen:
                continue
            seen.add(text)
            files.append(text.rstrip("\n"))
            size += len(text.encode("utf-8")) + 1
    return files


# --------------------------------------------------------------------------------------------
# Mixed JSONL
# --------------------------------------------------------------------------------------------


def generate_mini(seed: int, n_stories: int, n_code: int) -> list[dict[str, object]]:
    """Stories and short PEP 8 formatted Python files, shuffled, one record per JSONL line."""
    rng = Rng(seed)
    texts: list[tuple[str, str]] = [("story", generate_story(rng)) for _ in range(n_stories)]
    code: list[str] = []
    while len(code) < n_code:
        module = generate_code_file_groups(rng, pep8=True)[0]  # a separate test file is left out
        if len(module) <= MINI_CODE_MAX_CHARS:
            code.append(module)
    texts += [("code", text) for text in code[:n_code]]
    return [{"id": i, "kind": kind, "text": text}
            for i, (kind, text) in enumerate(rng.shuffled(texts))]


# --------------------------------------------------------------------------------------------
# Files, manifest and command line
# --------------------------------------------------------------------------------------------

DESCRIPTIONS = {
    STORIES_NAME: "Simple children's stories in English (short sentences, common words, named "
                  "characters, a small problem and a happy ending); one story per paragraph, "
                  "paragraphs separated by one blank line. Default calibration data for story "
                  "models such as stories260K.",
    CODE_NAME: "Python source files (functions, classes, dataclasses, docstrings, type hints, "
               "small algorithms, file handling, unit tests); each paragraph is one file that "
               "starts with a '# file: path.py' comment and has no blank lines inside, files "
               "separated by one blank line. Every file is checked with ast.parse and compile. "
               "Default calibration data for code models.",
    MINI_NAME: "A small JSONL mix of stories and PEP 8 formatted Python files, one JSON object "
               "per line with fields id, kind ('story' or 'code') and text.",
}
NOTE = ("Synthetic text generated by the project's own generator from templates and a fixed "
        "seed; no text was taken from other sources.")


def count_paragraphs(text: str) -> int:
    """Blocks of non-blank lines, split as the calibration reader splits paragraphs."""
    count, inside = 0, False
    for line in text.split("\n"):
        blank = not line.strip()
        if not blank and not inside:
            count += 1
        inside = not blank
    return count


def build(seed: int) -> dict[str, bytes]:
    """Generate every output file in memory, the manifest last."""
    seeds = {STORIES_NAME: seed, CODE_NAME: seed + 1, MINI_NAME: seed + 2}
    stories = generate_stories(seeds[STORIES_NAME], STORIES_TARGET_BYTES)
    code = generate_code(seeds[CODE_NAME], CODE_TARGET_BYTES)
    mini = generate_mini(seeds[MINI_NAME], MINI_STORIES, MINI_CODE)
    outputs = {
        STORIES_NAME: ("\n\n".join(stories) + "\n").encode("utf-8"),
        CODE_NAME: ("\n\n".join(code) + "\n").encode("utf-8"),
        MINI_NAME: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mini).encode("utf-8"),
    }
    entries = []
    for name, data in outputs.items():
        text = data.decode("utf-8")
        entries.append({
            "name": name,
            "description": DESCRIPTIONS[name],
            "generator": "datasets/generate.py",
            "seed": seeds[name],
            "bytes": len(data),
            "lines": text.count("\n"),
            "paragraphs": count_paragraphs(text),
            "documents": text.count("\n") if name.endswith(".jsonl") else count_paragraphs(text),
            "sha256": hashlib.sha256(data).hexdigest(),
            "license": "same as the project",
            "note": NOTE,
        })
    manifest = {
        "generator": "datasets/generate.py",
        "command": f"python3 datasets/generate.py --seed {seed}",
        "check": "python3 datasets/generate.py --check",
        "files": entries,
    }
    outputs[MANIFEST_NAME] = (json.dumps(manifest, indent=2) + "\n").encode("utf-8")
    return outputs


def write_atomic(path: str, data: bytes) -> None:
    """Write data to a temporary file in the same directory, then rename it over path."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix="-" + os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def summary_line(name: str, data: bytes) -> str:
    """One line of the summary table."""
    text = data.decode("utf-8")
    return (f"{name:<22} {len(data):>9,} bytes {text.count(chr(10)):>7,} lines "
            f"{count_paragraphs(text):>6,} paragraphs  sha256 {hashlib.sha256(data).hexdigest()}")


def check(outputs: dict[str, bytes], out_dir: str) -> int:
    """Compare freshly generated outputs with the files on disk; 0 if all match, else 1."""
    failures = 0
    for name, data in outputs.items():
        path = os.path.join(out_dir, name)
        expected = hashlib.sha256(data).hexdigest()
        try:
            with open(path, "rb") as handle:
                actual = hashlib.sha256(handle.read()).hexdigest()
        except FileNotFoundError:
            print(f"MISSING  {name}")
            failures += 1
            continue
        if actual == expected:
            print(f"ok       {name}  {actual}")
        else:
            print(f"CHANGED  {name}  on disk {actual}, generated {expected}")
            failures += 1
    if failures:
        print(f"{failures} file(s) differ from what the generator produces; "
              "run python3 datasets/generate.py to regenerate them")
        return 1
    print("all files match the generator")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"base seed (default {DEFAULT_SEED}; files use seed, seed+1, seed+2)")
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="output directory (default: the directory of this script)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate in memory and verify the files' sha256; exit 1 on mismatch")
    args = parser.parse_args(argv)
    outputs = build(args.seed)
    if args.check:
        return check(outputs, args.out)
    os.makedirs(args.out, exist_ok=True)
    for name, data in outputs.items():
        write_atomic(os.path.join(args.out, name), data)
        print(summary_line(name, data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
