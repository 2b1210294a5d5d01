//! Prometheus' query language, served: PromQL parsed by the
//! `promql-parser` crate (GreptimeDB's port of Prometheus' own grammar)
//! and evaluated here, over the samples a [`Source`] selects by label
//! matchers (the database reader of remote read: the samples table and
//! every measurement as `<measurement>_<field>`), with the answers and
//! error shapes of Prometheus' HTTP API (`answers.rs`). The HTTP routes
//! are in `api/prom_api.rs`; what differs from Prometheus 2.42 is listed
//! in docs/compatibility.md.
//!
//! The evaluation follows Prometheus 2.42's engine (`promql/engine.go`,
//! `functions.go`): every node is evaluated for all the query's steps at
//! once, an instant vector selector takes each series' newest sample in
//! `[t - lookback, t]` (none when it is a stale marker), a range selector
//! the samples in `[t - range, t]`.

pub mod answers;
pub mod engine;
mod functions;
mod value;

pub use engine::{Engine, EvalError, QueryRange, Source, Value};

/// `text` parsed as PromQL of Prometheus 2.42: the crate's grammar, with
/// `holt_winters` (2.42's name of what Prometheus 3 calls
/// `double_exponential_smoothing`) known to it.
///
/// A query nesting deeper than [`MAX_NESTING`] is refused before it is
/// parsed: the tree is walked (and dropped) recursively, and a stack
/// overflow would abort the whole service.
pub fn parse(text: &str) -> Result<promql_parser::parser::Expr, String> {
    let nesting = nesting_bound(text);
    if nesting > MAX_NESTING {
        return Err(format!(
            "the query nests about {nesting} expressions deep, over the limit of {MAX_NESTING}"
        ));
    }
    use promql_parser::parser::function::{Function, register_extra_functions};
    use promql_parser::parser::value::ValueType;
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let holt_winters = Function::new(
            "holt_winters",
            vec![ValueType::Matrix, ValueType::Scalar, ValueType::Scalar],
            0,
            ValueType::Vector,
            false,
        );
        // Only a clash with a built-in function fails, and this one is not.
        let _ = register_extra_functions(vec![holt_winters]);
    });
    promql_parser::parser::parse(text)
}

/// How deep a query's expressions may nest (parentheses, brackets and
/// operators together); dashboards' queries nest a few dozen deep.
pub const MAX_NESTING: usize = 1000;

/// An upper bound of the depth of `text`'s expression tree: its deepest
/// bracket nesting plus every operator outside strings (a chain of
/// operators is a tree as deep as it is long).
fn nesting_bound(text: &str) -> usize {
    let (mut depth, mut deepest, mut operators) = (0usize, 0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut word = String::new();
    let words = |word: &mut String, operators: &mut usize| {
        if matches!(word.as_str(), "and" | "or" | "unless" | "atan2") {
            *operators += 1;
        }
        word.clear();
    };
    for c in text.chars() {
        if let Some(q) = quote {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') if q != '`' => escaped = true,
                (false, c) if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        words(&mut word, &mut operators);
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '^' | '=' | '!' | '<' | '>' => operators += 1,
            _ => {}
        }
    }
    words(&mut word, &mut operators);
    deepest + operators
}
