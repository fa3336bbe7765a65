"""The data stage (rules/data.smk): every corpus, wherever it lives, becomes normalised Parquet, a tokenizer, token
blocks and evaluation prompts.

- `fetch`: the `fetch` and `unpack` rules: resumable, sha256-checked downloads of `source: url` files.
- `downloads`: where fetched files and archive members live under results/downloads (paths only; Snakefile-safe).
- `resume`: the validator (ETag, Last-Modified) saved beside a .part, sent as If-Range so a resume never splices.
- `pinning`: which URLs may be fetched without a sha256 (plain http off this machine may not; Snakefile-safe).
- `readers`: parsing of text, jsonl, csv and parquet files into rows.
- `cleaning`: the registered text cleanings (`datasets.<key>.cleaning`).
- `splits`: what one split's job sees of its dataset's entry (its own `max_rows`; Snakefile-safe).
- `recipes`: the registered split recipes (`raw`, MixCE's `mixce` with its top-up).
- `builtin_corpus`: the synthetic grammar corpus whose true next-word law is known.
- `prepare`: the `download` and `prompts` rules' command line (a split to Parquet, prompts from a split).
- `prompts`: cutting documents into prompt prefixes and human references.
- `tokenization`: the `tokenizer` and `tokenize` rules (BPE training, block grouping).
"""
