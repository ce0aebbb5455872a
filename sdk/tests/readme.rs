//! The README's Rust example is `examples/readme.rs`, byte for byte: the example is built and run
//! with the `bench` feature (and is the crate docs' doctest), so the README cannot drift from
//! code that compiles and runs.

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../examples/readme.rs");

/// The first fenced ```rust block after the heading that starts with `heading`.
fn rust_block_after<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let section = &text[text.find(heading)?..];
    let start = section.find("\n```rust\n")? + "\n```rust\n".len();
    let len = section[start..].find("\n```\n")? + 1;
    Some(&section[start..start + len])
}

#[test]
fn the_readme_example_is_examples_readme_rs() {
    let block = rust_block_after(README, "## Launching a kernel").expect("a ```rust block under \"## Launching a kernel\" in README.md");
    assert!(
        block == EXAMPLE,
        "the README's Rust example differs from sdk/examples/readme.rs; copy one onto the other\n--- README ---\n{block}\n--- example ---\n{EXAMPLE}"
    );
}

#[test]
fn the_block_is_found_exactly() {
    let text = "# x\n```rust\nno\n```\n## Launching a kernel\ntext\n```rust\nfn main() {}\n```\n```rust\nlater\n```\n";
    assert_eq!(rust_block_after(text, "## Launching a kernel"), Some("fn main() {}\n"));
    assert_eq!(rust_block_after(text, "## Missing"), None);
}
