"""The kernel every package of deepvm uses: errors, DEEPVM_HOME, atomic writes, bounded reading of the
files users hand deepvm, strict JSON documents, and the state database with its locks. Nothing here
imports another part of deepvm, so nodes, the head and the user's machine can all rely on it."""
