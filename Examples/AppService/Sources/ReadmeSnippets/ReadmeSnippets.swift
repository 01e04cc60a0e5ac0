// README.md's Swift snippets marked `<!-- compiled -->` are copied beside this file by scripts/readme-snippets
// (Snippet_N.swift, git-ignored) before scripts/test builds this package: compiled, never run.

/// The module the README's snippets share.
enum ReadmeSnippets {}
