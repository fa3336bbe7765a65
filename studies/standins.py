"""Stand-ins for everything configs/paper.yaml downloads, saved exactly as the originals are (`make rehearsal`).

The rehearsal runs the paper's study on CPU with these in place of the hub models, the hub datasets and MixCE's
files, so every rule, every family's tokenizer, every recipe and every download path runs as it will for real:

- models/{opt-125m,gpt2,gpt-neo-1.3b}: tiny random checkpoints of the three families (`studies.families`:
  OPT float16 with `</s>` prepended and pad 1, GPT-2, GPT-Neo with local attention layers), each with its
  family's tokenizer type, learnt from the stand-in text;
- models/gpt2-large: a GPT-2 checkpoint shaped as gpt2-large is stored (GPT2LMHeadModel, float32, GPT-2's
  tokenizer), larger than the others, as the MAUVE featuriser;
- datasets/Salesforce/wikitext: a hub-shaped dataset repository (README.md with `configs`, one Parquet file per
  split under wikitext-2-raw-v1/ and wikitext-103-raw-v1/, rows as WikiText raw has them: " = Title = ", "",
  paragraphs with spaced punctuation and " @-@ "), loaded by `datasets.load_dataset` through `source: hf`;
  WikiText-103's test articles are WikiText-2's, as in the originals;
- served/: the files the loopback server answers at the real URL paths: webtext.{test,train}.jsonl (the GPT-2
  output dataset's records) and writingPrompts.tar.gz (fairseq's six .wp_source/.wp_target files).

Text is English-like: sentences drawn from a fixed word list with a seeded generator, so the same seed gives the
same bytes. Documents are 130-300 words, inside the recipes' 50 < words < 1000 window and long enough for a
35-word prefix and its 80-word reference; a few WebText and WritingPrompts rows are made too short or too long
on purpose, so the filters drop rows and WebText's top-up from train runs.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np

SEED = 2024
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "one",
    "all",
    "we",
    "their",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "my",
    "now",
    "such",
    "like",
    "our",
    "over",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "city",
    "river",
    "army",
    "song",
    "album",
    "season",
    "game",
    "church",
    "school",
    "station",
    "river",
    "village",
    "war",
    "film",
    "team",
    "party",
    "house",
    "road",
    "island",
    "ship",
    "bridge",
    "music",
    "station",
    "king",
    "queen",
    "battle",
    "storm",
    "north",
    "south",
    "east",
    "west",
    "early",
    "late",
    "small",
    "large",
    "major",
    "local",
    "national",
    "public",
    "final",
    "second",
    "third",
    "several",
]
NAMES = (
    "Valkyria",
    "Tower",
    "Boston",
    "Ireland",
    "Victoria",
    "Hampton",
    "Kelly",
    "Arthur",
    "Dublin",
    "Maryland",
    "Essex",
    "Carolina",
    "Holland",
    "Albert",
    "Lincoln",
    "Oregon",
)
PAPER_MODELS = {"opt-125m": "opt", "gpt2": "gpt2", "gpt-neo-1.3b": "gpt-neo"}
WEBTEXT_PATH = "gpt-2/output-dataset/v1/webtext.{split}.jsonl"
WRITINGPROMPTS_PATH = "fairseq/data/writingPrompts.tar.gz"


def sentence(rng: np.random.Generator) -> list[str]:
    """One sentence as words; Zipf-like word choice, a capitalised first word, a name now and then."""
    n = int(rng.integers(8, 20))
    ranks = np.minimum(rng.zipf(1.3, size=n) - 1, len(WORDS) - 1)
    words = [WORDS[r] for r in ranks]
    if rng.random() < 0.4:
        words[int(rng.integers(1, n))] = NAMES[int(rng.integers(len(NAMES)))]
    words[0] = words[0].capitalize()
    return words


def document(rng: np.random.Generator, low: int = 130, high: int = 300) -> list[list[str]]:
    """Sentences whose words add up to a length in [low, high)."""
    target, sentences, total = int(rng.integers(low, high)), [], 0
    while total < target:
        words = sentence(rng)[: target - total]
        sentences.append(words)
        total += len(words)
    return sentences


def plain(sentences: list[list[str]]) -> str:
    """Running text: 'Word word, word. Word ...' (a comma now and then, periods at sentence ends)."""
    out = []
    for words in sentences:
        text = " ".join(words)
        if len(words) > 8:
            cut = text.split(" ")
            cut[4] += ","
            text = " ".join(cut)
        out.append(text + ".")
    return " ".join(out)


def wikitext_rows(rng: np.random.Generator, articles: int) -> list[str]:
    """WikiText raw rows: a heading, an empty row, paragraphs with WikiText's spacing, empty rows between."""
    rows = []
    for a in range(articles):
        rows += [f" = {NAMES[a % len(NAMES)]} {WORDS[int(rng.integers(len(WORDS)))]} = \n", ""]
        if a % 3 == 1:
            rows += [f" = = {WORDS[int(rng.integers(len(WORDS)))].capitalize()} = = \n", ""]
        for _ in range(int(rng.integers(2, 4))):
            text = plain(document(rng)).replace(",", " ,").replace(".", " .")
            words = text.split(" ")
            words[2] = words[2] + " @-@ " + WORDS[int(rng.integers(len(WORDS)))]
            rows += [" " + " ".join(words) + " \n", ""]
    return rows


def write_wikitext(root: Path, rng: np.random.Generator) -> dict[str, list[str]]:
    """datasets/Salesforce/wikitext as the hub repository is laid out; returns WikiText-2's rows per split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = root / "datasets" / "Salesforce" / "wikitext"
    wiki2 = {"train": wikitext_rows(rng, 14), "validation": wikitext_rows(rng, 3), "test": wikitext_rows(rng, 5)}
    # WikiText-103 shares WikiText-2's test and validation articles; its train set is larger.
    wiki103 = {
        "train": wiki2["train"] + wikitext_rows(rng, 6),
        "validation": wiki2["validation"],
        "test": wiki2["test"],
    }
    configs = []
    for config, splits in (("wikitext-103-raw-v1", wiki103), ("wikitext-2-raw-v1", wiki2)):
        data_files = []
        for split, rows in splits.items():
            path = repo / config / f"{split}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"text": pa.array(rows, pa.string())}), path)
            data_files.append(f"  - split: {split}\n    path: {config}/{split}-*")
        configs.append(f"- config_name: {config}\n  data_files:\n" + "\n".join(data_files))
    card = (
        "---\nlanguage:\n- en\nlicense:\n- cc-by-sa-3.0\npretty_name: WikiText (rehearsal stand-in)\nconfigs:\n"
        + "\n".join(configs)
        + "\n---\n\n# WikiText stand-in\n\nRandom English-like text in WikiText raw's layout, "
        "for `make rehearsal`; not WikiText.\n"
    )
    (repo / "README.md").write_text(card)
    return wiki2


def webtext_files(rng: np.random.Generator) -> dict[str, bytes]:
    """webtext.{test,train}.jsonl: records as the GPT-2 output dataset has them ({"id", "ended", "length", "text"}).

    Test has 14 documents, of which one is too short and one too long for the 50 < words < 1000 window, so 12
    pass and the rehearsal's 14-row cut needs 2 rows of train's head (the top-up)."""

    def record(i: int, text: str) -> str:
        return json.dumps({"id": i, "ended": True, "length": len(text.split()), "text": text})

    test = [plain(document(rng)).replace(". ", ".\n\n", 2) for _ in range(14)]
    test[3] = plain(document(rng, 20, 40))
    test[9] = plain(document(rng, 1100, 1200))
    train = [plain(document(rng)) for _ in range(80)]
    return {
        WEBTEXT_PATH.format(split=split): "".join(record(i, t) + "\n" for i, t in enumerate(texts)).encode()
        for split, texts in (("test", test), ("train", train))
    }


def writingprompts_archive(rng: np.random.Generator) -> bytes:
    """writingPrompts.tar.gz as fairseq ships it: {train,valid,test}.wp_{source,target}, tokenised text with
    " <newline> " and `` '' quotes; test's 14 pairs hold one story too short for the length window."""

    def pairs(n: int, short: int | None = None) -> tuple[str, str]:
        sources, targets = [], []
        for i in range(n):
            prompt = " ".join(sentence(rng)) + " ."
            story = document(rng, 20, 40) if i == short else document(rng)
            body = " <newline> <newline> ".join(" ".join(w) + " ." for w in story)
            sources.append(f"[ WP ] {prompt}\n")
            targets.append(f"`` {body} ''\n")
        return "".join(sources), "".join(targets)

    buffer = io.BytesIO()
    # gzip's header holds a time stamp: mtime 0, so the same seed gives the same archive bytes (and sha256).
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for split, n in (("train", 6), ("valid", 4), ("test", 14)):
            for suffix, text in zip(("wp_source", "wp_target"), pairs(n, short=5 if split == "test" else None)):
                data = text.encode()
                info = tarfile.TarInfo(f"writingPrompts/{split}.{suffix}")
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def make_featuriser(root: Path, texts: list[str]) -> Path:
    """models/gpt2-large: a GPT2LMHeadModel saved in float32 with GPT-2's tokenizer, as the hub's gpt2-large."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from studies.families import INIT_STD, POSITIONS, make_tokenizer

    folder = root / "models" / "gpt2-large"
    tokenizer = make_tokenizer("gpt2", texts)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(SEED)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=POSITIONS,
        n_embd=64,
        n_layer=4,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=INIT_STD,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def build(root: Path) -> dict[str, bytes]:
    """Write every stand-in under `root` (once: a finished build is reused) and return the served files."""
    root = Path(root)
    rng = np.random.default_rng(SEED)
    wiki2 = write_wikitext(root, rng) if not (root / ".built").exists() else None
    served = {
        **webtext_files(np.random.default_rng(SEED + 1)),
        WRITINGPROMPTS_PATH: writingprompts_archive(np.random.default_rng(SEED + 2)),
    }
    if wiki2 is None:
        return served
    from studies.families import make_checkpoint

    shutil.rmtree(root / "models", ignore_errors=True)  # what an interrupted build left
    texts = [row for row in wiki2["train"] if row.strip()]
    texts += [json.loads(line)["text"] for line in served[WEBTEXT_PATH.format(split="train")].decode().splitlines()]
    for key, family in PAPER_MODELS.items():
        folder = make_checkpoint(root / "models" / "tmp", family, texts)
        folder.rename(root / "models" / key)
    (root / "models" / "tmp").rmdir()
    make_featuriser(root, texts)
    (root / ".built").write_text("")
    return served
