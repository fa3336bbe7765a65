"""The data stage (rules/data.smk): every corpus becomes normalised Parquet, a tokenizer, token blocks and prompts.

Downloads: `fetch` (the `fetch` and `unpack` rules' command line: sha256-checked downloads of `source: url` files),
`transfer` (a download's retried GETs into its `.part`, resumed with a Range request), `resume` (the validator sent
as If-Range so a resume never splices), `unpacking` (a tar or zip archive's named members in one streaming pass),
`downloads` (where fetched files live; paths only) and `pinning` (which URLs may be fetched without a sha256). Rows:
`readers`, `cleaning`, `splits` (one split's view of its dataset's entry), `recipes` (`raw`, MixCE's `mixce`),
`builtin_corpus`, `prepare` (the `download` and `prompts` rules), `prompts`, `tokenization` (the `tokenizer` and
`tokenize` rules); `gguf` (the `dequantise` rule). Snakefile-safe: `downloads`, `pinning`, `splits`.
"""
