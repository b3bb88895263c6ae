//! The recipe file as a tree of YAML nodes, each with its line and column, read within fixed
//! limits (nodes, depth, bytes). Shapes are checked later ([`super::raw`]), node by node, so one
//! wrong key or type never hides the problems elsewhere in the file.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, NonFiniteFloatPolicy, Options, Spanned};

use super::diagnostic::{Diagnostic, Loc};
use super::limits::{MAX_ALIAS_EXPANSION, MAX_YAML_DEPTH, MAX_YAML_NODES, MAX_YAML_TEXT_BYTES};
use super::yaml_errors::yaml_diagnostic;

/// One node of the file and where it is (for an alias, where it is used).
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub loc: Loc,
    pub node: Node,
}

/// A YAML node. Integers keep their sign and magnitude (`UInt` above `i64::MAX`); scalars that
/// are neither numbers, booleans nor null are strings.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Box<str>),
    Seq(Vec<Item>),
    /// Entries in file order, duplicates included (they are reported by the reader).
    Map(Vec<(Item, Item)>),
}

impl Node {
    /// What the node is, for "expected a list, got ..." messages.
    pub fn kind(&self) -> NodeKind<'_> {
        NodeKind(self)
    }
}

/// Displays a node's kind and, for a scalar, its value (cut short when long).
pub struct NodeKind<'a>(&'a Node);

impl fmt::Display for NodeKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Node::Null => f.write_str("empty"),
            Node::Bool(b) => write!(f, "the boolean `{b}`"),
            Node::Int(i) => write!(f, "the integer `{i}`"),
            Node::UInt(u) => write!(f, "the integer `{u}`"),
            Node::Float(x) => write!(f, "the number `{x}`"),
            Node::Str(s) => write!(f, "the string \"{}\"", super::diagnostic::shorten(s, 60)),
            Node::Seq(_) => f.write_str("a list"),
            Node::Map(_) => f.write_str("a mapping"),
        }
    }
}

/// Stack for parsing: the deserializer recurses once per nesting level, with frames of tens of
/// KiB in debug builds, so [`MAX_YAML_DEPTH`] levels would overflow a small thread's stack. Only
/// the pages used are ever committed.
const PARSER_STACK_BYTES: usize = 256 << 20;

/// Parses `text` into a tree, or says where the YAML is broken or over a limit. Runs on a
/// thread of its own with a stack that fits the deepest recipe allowed, whatever thread calls.
pub fn parse(text: &str) -> Result<Item, Diagnostic> {
    std::thread::scope(|scope| {
        match std::thread::Builder::new()
            .name("recipe-yaml".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, || parse_here(text))
        {
            Ok(parser) => parser
                .join()
                .unwrap_or_else(|_| Err(Diagnostic::new(Loc::default(), "the YAML reader failed on this recipe"))),
            // No thread to be had (a process limit): parse here, the stack is likely enough.
            Err(_) => parse_here(text),
        }
    })
}

fn parse_here(text: &str) -> Result<Item, Diagnostic> {
    let mut budget = Budget::default();
    budget.max_nodes = MAX_YAML_NODES;
    budget.max_events = 2 * MAX_YAML_NODES;
    budget.max_depth = MAX_YAML_DEPTH;
    budget.max_total_scalar_bytes = MAX_YAML_TEXT_BYTES;
    budget.max_recorded_anchor_events = MAX_ALIAS_EXPANSION;
    let mut options = Options::default();
    options.budget = Some(budget);
    // Duplicate keys are the reader's to report, every one of them, with both places.
    options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
    options.non_finite_float_policy = NonFiniteFloatPolicy::PassThrough;
    options.alias_limits.max_total_replayed_events = MAX_ALIAS_EXPANSION;
    options.with_snippet = false;
    // YAML 1.2: `y`, `no`, `on` are strings; only `true` and `false` are booleans.
    options.strict_booleans = true;
    // A key is its text, whatever it looks like (`~: x` is the key "~").
    options.null_as_string = true;
    serde_saphyr::from_str_with_options::<Spanned<Tree>>(text, options)
        .map(|tree| Item { loc: tree.referenced.into(), node: tree.value.0 })
        .map_err(|e| yaml_diagnostic(&e, text))
}

/// A node as serde-saphyr hands it over; children carry their own locations.
struct Tree(Node);

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor).map(Tree)
    }
}

fn item(spanned: Spanned<Tree>) -> Item {
    Item { loc: spanned.referenced.into(), node: spanned.value.0 }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(node_of_u64(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(match (i64::try_from(v), u64::try_from(v)) {
            (Ok(i), _) => Node::Int(i),
            (_, Ok(u)) => Node::UInt(u),
            // Out of every integer type the recipe has: kept as written, so that the reader can
            // say "out of range" with the number.
            _ => Node::Str(v.to_string().into()),
        })
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        Ok(u64::try_from(v).map_or_else(|_| Node::Str(v.to_string().into()), node_of_u64))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.into()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v.into_boxed_str()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(element) = seq.next_element::<Spanned<Tree>>()? {
            items.push(item(element));
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let value = map.next_value::<Spanned<Tree>>()?;
            let key = Item { loc: key.referenced.into(), node: Node::Str(key.value.0) };
            entries.push((key, item(value)));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key as written: `y`, `1` and `null` are the keys "y", "1" and "null".
struct KeyText(Box<str>);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a name as the key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.into()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<KeyText, E> {
                Ok(KeyText(v.into_boxed_str()))
            }
        }
        deserializer.deserialize_string(KeyVisitor)
    }
}

fn node_of_u64(u: u64) -> Node {
    i64::try_from(u).map_or(Node::UInt(u), Node::Int)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(text: &str) -> Node {
        parse(text).unwrap().node
    }

    fn entries(text: &str) -> Vec<(String, Node)> {
        let Node::Map(entries) = node(text) else { panic!("not a mapping: {text}") };
        entries
            .into_iter()
            .map(|(k, v)| match k.node {
                Node::Str(key) => (key.to_string(), v.node),
                other => panic!("key {other:?}"),
            })
            .collect()
    }

    #[test]
    fn scalars_keep_their_kind_and_size() {
        let got = entries(
            "a: 1\nb: -2\nc: 18446744073709551615\nd: 99999999999999999999999\ne: 2.5\nf: x\ng: 1981-09-01\n\
             h: true\ni:\nj: \"12\"\nk: 2026-11-01T00Z\nl: y\n",
        );
        let want = [
            ("a", Node::Int(1)),
            ("b", Node::Int(-2)),
            ("c", Node::UInt(u64::MAX)),
            ("d", Node::Float(1e23)),
            ("e", Node::Float(2.5)),
            ("f", Node::Str("x".into())),
            ("g", Node::Str("1981-09-01".into())),
            ("h", Node::Bool(true)),
            ("i", Node::Null),
            ("j", Node::Str("12".into())),
            ("k", Node::Str("2026-11-01T00Z".into())),
            ("l", Node::Str("y".into())),
        ];
        assert_eq!(got, want.map(|(k, v)| (k.to_string(), v)).to_vec());
    }

    #[test]
    fn keys_are_their_text() {
        let keys: Vec<String> = entries("y: 1\nn: 2\n1: 3\n~: 4\ntrue: 5\n").into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["y", "n", "1", "~", "true"]);
    }

    #[test]
    fn duplicate_keys_reach_the_reader_with_their_places() {
        let Node::Map(entries) = node("a: 1\nb: 2\na: 3\n") else { panic!() };
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2].0.loc, Loc { line: 3, column: 1 });
    }

    #[test]
    fn limits_are_said_in_recipe_terms() {
        let deep = format!("a: {}{}", "[".repeat(70), "]".repeat(70));
        let e = parse(&deep).unwrap_err();
        assert!(e.message.contains("nested deeper than 64 levels"), "{e:?}");
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";
        let e = parse(bomb).unwrap_err();
        assert!(e.message.contains("expand") && !e.message.contains('{'), "{e:?}");
    }
}
