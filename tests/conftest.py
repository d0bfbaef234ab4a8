# pytest puts this directory on sys.path (rootdir conftest, "prepend" import mode), so test
# modules in subfolders can `import reference` (the pure-Python oracles).
