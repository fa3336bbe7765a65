"""Developer tools: `compare_results` (two finished studies' results, file by file, after a refactor) and
`mutmut_widen` (mutmut's test selection widened to whole test files). Nothing in workflow_lib imports them."""
