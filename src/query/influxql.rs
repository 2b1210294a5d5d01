//! InfluxQL, the subset halite answers (docs/compatibility.md): the
//! statements Telegraf and Grafana send to set up and browse a database.
//! Parse errors read as InfluxDB's (`found X, expected Y at line 1, char
//! N`), so clients show the same messages.

pub use crate::catalog::PolicySpec;

/// One statement of a `/query` request.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `CREATE DATABASE name [WITH [DURATION d] [REPLICATION n] [SHARD
    /// DURATION d] [NAME rp]]`: `with` is the policy the database starts
    /// with (else `autogen`, forever).
    CreateDatabase {
        name: String,
        with: Option<DatabasePolicy>,
    },
    DropDatabase {
        name: String,
    },
    /// `DROP MEASUREMENT m`: its series and points in every retention
    /// policy of the statement's database.
    DropMeasurement {
        name: String,
    },
    /// `CREATE RETENTION POLICY rp ON db DURATION d REPLICATION n [SHARD
    /// DURATION d] [DEFAULT]`.
    CreateRetentionPolicy {
        name: String,
        on: String,
        policy: PolicySpec,
        default: bool,
    },
    /// `ALTER RETENTION POLICY rp ON db` and at least one of `DURATION`,
    /// `REPLICATION`, `SHARD DURATION`, `DEFAULT`.
    AlterRetentionPolicy {
        name: String,
        on: String,
        policy: PolicySpec,
        default: bool,
    },
    DropRetentionPolicy {
        name: String,
        on: String,
    },
    /// `CREATE CONTINUOUS QUERY name ON db [RESAMPLE [EVERY d] [FOR d]]
    /// BEGIN select END`; `text` the statement as written.
    CreateContinuousQuery {
        name: String,
        on: String,
        every: Option<i64>,
        for_: Option<i64>,
        select: Box<Select>,
        text: String,
    },
    DropContinuousQuery {
        name: String,
        on: String,
    },
    ShowContinuousQueries,
    /// `DELETE [FROM m, /re/ …] [WHERE tags and time]` (points, in every
    /// retention policy; a series left no point goes too) and `DROP SERIES
    /// [FROM …] [WHERE tags]` (`drop`: whole series).
    DeleteSeries {
        sources: Vec<FromName>,
        condition: Option<Expr>,
        drop: bool,
    },
    ShowDatabases,
    ShowRetentionPolicies {
        on: Option<String>,
    },
    ShowMeasurements {
        on: Option<String>,
        /// `WITH MEASUREMENT = m` or `=~ /re/`.
        with: Option<NameMatch>,
        condition: Option<Expr>,
        paging: Paging,
    },
    ShowTagKeys {
        on: Option<String>,
        from: Option<String>,
        condition: Option<Expr>,
        paging: Paging,
    },
    ShowTagValues {
        on: Option<String>,
        from: Option<String>,
        keys: NameMatch,
        condition: Option<Expr>,
        paging: Paging,
    },
    ShowFieldKeys {
        on: Option<String>,
        /// The retention policy `FROM rp.m` names (the default's otherwise):
        /// field keys, unlike the series, are a policy's own in InfluxDB.
        retention_policy: Option<String>,
        from: Option<String>,
        paging: Paging,
    },
    ShowSeries {
        on: Option<String>,
        from: Option<String>,
        condition: Option<Expr>,
        paging: Paging,
    },
    /// `SHOW SERIES|MEASUREMENT|TAG KEY|TAG VALUES|FIELD KEY [EXACT]
    /// CARDINALITY …`.
    ShowCardinality {
        of: CardinalityOf,
        exact: bool,
        on: Option<String>,
        from: Option<String>,
        condition: Option<Expr>,
        paging: Paging,
    },
    Select(Box<Select>),
    /// A statement InfluxQL has that halite does not answer yet (its
    /// first words, for the error).
    Unsupported(String),
}

/// `CREATE DATABASE … WITH`'s policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatabasePolicy {
    pub spec: PolicySpec,
    pub name: Option<String>,
}

/// A `SHOW` statement's `LIMIT n OFFSET m` (no limit: `None` or 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Paging {
    pub limit: Option<usize>,
    pub offset: usize,
}

impl Paging {
    /// The rows of `v` the paging keeps.
    pub fn apply<T>(self, v: Vec<T>) -> Vec<T> {
        v.into_iter()
            .skip(self.offset)
            .take(self.limit.filter(|n| *n > 0).unwrap_or(usize::MAX))
            .collect()
    }
}

/// What a `SHOW … CARDINALITY` counts.
#[derive(Debug, Clone, PartialEq)]
pub enum CardinalityOf {
    Series,
    Measurements,
    TagKeys,
    TagValues(NameMatch),
    FieldKeys,
}

/// Which names a `SHOW` statement takes: `WITH KEY = k`, `IN (a, b)`,
/// `!= k`, `=~ /re/`, `!~ /re/` (and `WITH MEASUREMENT`'s `=`, `=~`).
#[derive(Debug, Clone, PartialEq)]
pub enum NameMatch {
    In(Vec<String>),
    NotEq(String),
    Regex(String),
    NotRegex(String),
}

/// `SELECT … FROM m [WHERE …] [GROUP BY …] [fill(…)] [ORDER BY time
/// DESC] [LIMIT n] [OFFSET n] [SLIMIT n] [SOFFSET n]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    pub fields: Vec<SelectField>,
    /// `INTO [db.][rp.]m` or `… .:MEASUREMENT`: where the answer's rows
    /// are written as points.
    pub into: Option<IntoTarget>,
    /// The database `FROM db.rp.m` names; else the request's `db`.
    pub database: Option<String>,
    /// The retention policy `FROM rp.m` or `FROM db.rp.m` names (`None`
    /// when left out). halite has one, `autogen`: another is not found.
    pub retention_policy: Option<String>,
    /// The measurement (the first named, where `sources` holds more).
    pub from: String,
    /// Where `FROM` names more than one measurement or a pattern (`FROM
    /// cpu, mem`, `FROM /^cpu/`): each as written; empty for one named.
    pub sources: Vec<FromSource>,
    /// `FROM (SELECT …)`: the statement whose answer this one reads.
    pub subquery: Option<Box<Select>>,
    pub condition: Option<Expr>,
    /// `GROUP BY time(interval[, offset])`, nanoseconds.
    pub group_time: Option<(i64, i64)>,
    pub group_tags: GroupTags,
    pub fill: Fill,
    pub descending: bool,
    pub limit: Option<usize>,
    pub offset: usize,
    pub slimit: Option<usize>,
    pub soffset: usize,
    /// The name the answer gives its time column: `time`, or the alias of
    /// `time` in the select list (`SELECT time AS t, v`), which InfluxDB
    /// takes as that and not as a column of its own.
    pub time_column: String,
}

/// A measurement `FROM` names, or a pattern of names, and the database
/// and retention policy named before it.
/// `SELECT … INTO`'s target.
#[derive(Debug, Clone, PartialEq)]
pub struct IntoTarget {
    pub database: Option<String>,
    pub retention_policy: Option<String>,
    /// `None`: `:MEASUREMENT`, each row into the measurement it came from.
    pub measurement: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FromSource {
    pub database: Option<String>,
    pub retention_policy: Option<String>,
    pub measurement: FromName,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FromName {
    Name(String),
    Regex(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SelectField {
    pub expr: SelectExpr,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SelectExpr {
    /// `*`: every field and tag.
    Wildcard,
    /// A field or tag by name.
    Column(String),
    /// `/re/`: every field and tag whose name matches.
    Matching(String),
    /// `func(field[, arg])`: `percentile(f, 95)` has an argument, as
    /// `sample(f, 3)` and `integral(f, 1m)` (its unit, nanoseconds).
    Call {
        func: String,
        field: String,
        arg: Option<f64>,
    },
    /// `func(*[, arg])` or `func(/re/[, arg])` (`pattern`): the call of
    /// every field that matches and the function takes, named
    /// `func_field`.
    CallEach {
        func: String,
        pattern: Option<String>,
        arg: Option<f64>,
    },
    /// `distinct(field)`, or with `count` `count(distinct(field))`.
    Distinct { field: String, count: bool },
    /// `top(field[, tag…], n)` (`bottom` when `bottom`): the `n` largest
    /// (smallest) values, of one point per combination of the tags' values
    /// if tags are named.
    Rank {
        bottom: bool,
        field: String,
        tags: Vec<String>,
        n: usize,
    },
    /// Anything else the select list may hold: arithmetic (`100 -
    /// mean(x)`), calls of calls (`derivative(mean(x), 1s)`), literals.
    /// Checked when the statement runs, as InfluxDB compiles it, so its
    /// errors are a statement's and not the query's parse error.
    Expr(FieldExpr),
}

impl Select {
    /// Whether the select list calls a function other than a math one,
    /// anywhere in it (`mean(v) * 2`, `round(mean(v))`): what InfluxDB's
    /// `IsRawQuery` is not.
    pub fn calls_functions(&self) -> bool {
        fn calls(e: &FieldExpr) -> bool {
            match e {
                FieldExpr::Call { func, args } => {
                    !MATH.contains(&func.as_str()) || args.iter().any(calls)
                }
                FieldExpr::Binary { lhs, rhs, .. } => calls(lhs) || calls(rhs),
                _ => false,
            }
        }
        self.fields.iter().any(|f| match &f.expr {
            SelectExpr::Expr(e) => calls(e),
            e => e.is_call(),
        })
    }
}

impl SelectExpr {
    /// Whether the expression is a call of a function (of a field, or of
    /// fields that match).
    pub fn is_call(&self) -> bool {
        matches!(
            self,
            SelectExpr::Call { .. }
                | SelectExpr::CallEach { .. }
                | SelectExpr::Distinct { .. }
                | SelectExpr::Rank { .. }
        )
    }
}

/// A select-list expression as written, before it is checked.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldExpr {
    /// A field or tag by name.
    Column(String),
    /// `*` as a call's argument.
    Wildcard,
    /// `/re/`: the fields (and tags) whose names match.
    Regex(String),
    Integer(i64),
    Number(f64),
    /// A duration literal (`1s`), nanoseconds.
    Duration(i64),
    Str(String),
    Bool(bool),
    Call {
        func: String,
        args: Vec<FieldExpr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<FieldExpr>,
        rhs: Box<FieldExpr>,
    },
}

/// An arithmetic operator of the select list, as InfluxQL ranks them:
/// `*`, `/`, `%` and `&` before `+`, `-`, `|` and `^`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
        }
    }

    fn of(c: char) -> Option<(BinaryOp, u8)> {
        Some(match c {
            '+' => (BinaryOp::Add, 1),
            '-' => (BinaryOp::Sub, 1),
            '|' => (BinaryOp::BitOr, 1),
            '^' => (BinaryOp::BitXor, 1),
            '*' => (BinaryOp::Mul, 2),
            '/' => (BinaryOp::Div, 2),
            '%' => (BinaryOp::Mod, 2),
            '&' => (BinaryOp::BitAnd, 2),
            _ => return None,
        })
    }
}

/// The functions that transform a series (of a field, or of a call):
/// answered by the query's expressions, not as an aggregate.
pub const TRANSFORMS: [&str; 7] = [
    "derivative",
    "non_negative_derivative",
    "difference",
    "non_negative_difference",
    "moving_average",
    "cumulative_sum",
    "elapsed",
];

/// InfluxDB 1.6's math functions: of each row's value (of a field, a
/// call or an expression), answered beside arithmetic.
pub const MATH: [&str; 18] = [
    "abs", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "exp", "log", "ln", "log2",
    "log10", "sqrt", "pow", "floor", "ceil", "round",
];

/// How many operators and calls one select-list expression may hold.
/// InfluxDB has no limit; every walk of an expression here recurses once
/// per level, and what dashboards write holds a handful.
pub const MAX_FIELD_NODES: usize = 1000;

/// How deep subqueries may nest (`FROM (SELECT … FROM (SELECT …))`):
/// each level is a statement run, and its answer held, before the one
/// around it. InfluxDB has no limit; dashboards nest one or two.
pub const MAX_SUBQUERY_DEPTH: usize = 10;

#[derive(Debug, Clone, PartialEq)]
pub enum GroupTags {
    None,
    /// `GROUP BY *`
    All,
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Fill {
    Null,
    None,
    Previous,
    Linear,
    Value(f64),
}

/// A `WHERE` condition. A chain of `AND`s (or of `OR`s) is one node of
/// all its terms, so a dashboard's thousands of `OR`ed values make a flat
/// list rather than a tree as deep as the list is long, and the tree is
/// only as deep as its parentheses, which [`MAX_CONDITION_DEPTH`] bounds:
/// every walk of it (and its drop) recurses at most that deep.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Two or more terms, all of which hold.
    And(Vec<Expr>),
    /// Two or more terms, one of which holds.
    Or(Vec<Expr>),
    Compare {
        lhs: String,
        op: CompareOp,
        rhs: Operand,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    /// `=~ /re/`
    Match,
    /// `!~ /re/`
    NotMatch,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Str(String),
    Number(f64),
    /// A point in time, nanoseconds since the epoch (`now() - 1h`, an RFC
    /// 3339 string compared with `time`, `1596240000000ms`).
    Time(i64),
    Bool(bool),
    /// A regular expression (RE2 syntax, as Go's and InfluxDB's).
    Regex(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A bare word (keywords among them).
    Ident(String),
    /// A double-quoted identifier.
    Quoted(String),
    /// A single-quoted string.
    Str(String),
    Number(String),
    /// `/…/` after `=~` or `!~`.
    Regex(String),
    /// A comparison: `=`, `!=`, `<>`, `<`, `<=`, `>`, `>=`, `=~`, `!~`.
    Op(&'static str),
    Punct(char),
    Semicolon,
    Eof,
}

impl Token {
    /// The token as an error quotes it: a bounded prefix of what it holds.
    fn describe(&self) -> String {
        use crate::codec::quote_prefix;
        match self {
            Token::Ident(s) | Token::Number(s) => quote_prefix(s).into_owned(),
            Token::Quoted(s) => format!("\"{}\"", quote_prefix(s)),
            Token::Str(s) => format!("'{}'", quote_prefix(s)),
            Token::Regex(r) => format!("/{}/", quote_prefix(r)),
            Token::Op(o) => o.to_string(),
            Token::Punct(c) => c.to_string(),
            Token::Semicolon => ";".into(),
            Token::Eof => "EOF".into(),
        }
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self, Token::Ident(s) if s.eq_ignore_ascii_case(word))
    }
}

/// Whether a `/` after `prev` begins a regular expression rather than
/// divides: after `=~` and `!~`, and where a name is expected (a call's
/// argument, the select list, `FROM`, `GROUP BY`), which a division can
/// never follow.
fn regex_may_follow(prev: Option<&Token>) -> bool {
    match prev {
        Some(Token::Op(op)) => matches!(*op, "=~" | "!~"),
        Some(Token::Punct(c)) => matches!(c, '(' | ',' | '.'),
        Some(t) => t.is_word("SELECT") || t.is_word("FROM") || t.is_word("BY"),
        None => false,
    }
}

/// A token and where it starts (line, char; both from 1).
type Located = (Token, usize, usize);

fn lex(text: &str) -> Result<Vec<Located>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let advance = |i: &mut usize, line: &mut usize, col: &mut usize, c: char| {
        *i += 1;
        if c == '\n' {
            *line += 1;
            *col = 1;
        } else {
            *col += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let (at_line, at_col) = (line, col);
        if c.is_whitespace() {
            advance(&mut i, &mut line, &mut col, c);
            continue;
        }
        if c == '/' && regex_may_follow(out.last().map(|(t, _, _)| t)) {
            advance(&mut i, &mut line, &mut col, c);
            let mut re = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err(format!(
                        "unterminated regex at line {at_line}, char {at_col}"
                    ));
                };
                advance(&mut i, &mut line, &mut col, d);
                if d == '\\' && chars.get(i) == Some(&'/') {
                    advance(&mut i, &mut line, &mut col, '/');
                    re.push('/');
                    continue;
                }
                if d == '/' {
                    break;
                }
                re.push(d);
            }
            out.push((Token::Regex(re), at_line, at_col));
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let mut word = String::new();
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                let d = chars[i];
                word.push(d);
                advance(&mut i, &mut line, &mut col, d);
            }
            out.push((Token::Ident(word), at_line, at_col));
            continue;
        }
        if c.is_ascii_digit() {
            let mut n = String::new();
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                let d = chars[i];
                n.push(d);
                advance(&mut i, &mut line, &mut col, d);
            }
            out.push((Token::Number(n), at_line, at_col));
            continue;
        }
        if c == '"' || c == '\'' {
            advance(&mut i, &mut line, &mut col, c);
            let mut s = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err(format!(
                        "unterminated {} at line {at_line}, char {at_col}",
                        if c == '"' {
                            "quoted identifier"
                        } else {
                            "string"
                        }
                    ));
                };
                advance(&mut i, &mut line, &mut col, d);
                if d == '\\' {
                    if let Some(&e) = chars.get(i) {
                        advance(&mut i, &mut line, &mut col, e);
                        match e {
                            'n' => s.push('\n'),
                            '\\' | '"' | '\'' => s.push(e),
                            other => {
                                s.push('\\');
                                s.push(other);
                            }
                        }
                    }
                    continue;
                }
                if d == c {
                    break;
                }
                s.push(d);
            }
            let token = if c == '"' {
                Token::Quoted(s)
            } else {
                Token::Str(s)
            };
            out.push((token, at_line, at_col));
            continue;
        }
        let op = match (c, chars.get(i + 1).copied()) {
            ('<', Some('=')) => "<=",
            ('>', Some('=')) => ">=",
            ('!', Some('=')) => "!=",
            ('<', Some('>')) => "<>",
            ('=', Some('~')) => "=~",
            ('!', Some('~')) => "!~",
            ('<', _) => "<",
            ('>', _) => ">",
            ('=', _) => "=",
            _ => "",
        };
        if !op.is_empty() {
            for _ in 0..op.len() {
                let d = chars[i];
                advance(&mut i, &mut line, &mut col, d);
            }
            out.push((Token::Op(op), at_line, at_col));
            continue;
        }
        advance(&mut i, &mut line, &mut col, c);
        out.push((
            if c == ';' {
                Token::Semicolon
            } else {
                Token::Punct(c)
            },
            at_line,
            at_col,
        ));
    }
    // InfluxDB's scanner places EOF one char past the end.
    out.push((Token::Eof, line, col + 1));
    Ok(out)
}

/// How deep a condition's parentheses may nest. InfluxDB has no limit
/// (Go's stacks grow); ours do not, and every walk of a condition recurses
/// once per level. What dashboards write nests two or three deep.
pub const MAX_CONDITION_DEPTH: usize = 100;

/// A `SHOW` statement's database (`ON` or `FROM`'s), retention policy and
/// measurement.
type OnPolicyFrom = (Option<String>, Option<String>, Option<String>);

struct Parser {
    tokens: Vec<Located>,
    /// The statement text, and where each of its lines starts in it (a
    /// continuous query keeps the text it was created with).
    source: Vec<char>,
    line_starts: Vec<usize>,
    /// The next `SELECT` is a continuous query's.
    continuous: bool,
    at: usize,
    /// Parentheses open around the condition being parsed.
    depth: usize,
    /// Subqueries open around the statement being parsed.
    subqueries: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at].0
    }

    fn next(&mut self) -> Located {
        let t = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    fn error(&self, expected: &str) -> String {
        let (t, line, col) = &self.tokens[self.at];
        format!(
            "found {}, expected {expected} at line {line}, char {col}",
            t.describe()
        )
    }

    fn word(&mut self, word: &str) -> Result<(), String> {
        if self.peek().is_word(word) {
            self.next();
            Ok(())
        } else {
            Err(self.error(word))
        }
    }

    fn accept(&mut self, word: &str) -> bool {
        if self.peek().is_word(word) {
            self.next();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        match self.peek().clone() {
            Token::Ident(s) | Token::Quoted(s) => {
                self.next();
                Ok(s)
            }
            _ => Err(self.error("identifier")),
        }
    }

    fn on_clause(&mut self) -> Result<Option<String>, String> {
        if self.accept("ON") {
            Ok(Some(self.ident()?))
        } else {
            Ok(None)
        }
    }

    /// `ON db` and `FROM m` (one measurement; `FROM "rp"."m"` names its
    /// retention policy first, `FROM "db"."rp"."m"` or `FROM db..m` its
    /// database, which then wins over `ON`).
    fn on_and_from(&mut self) -> Result<(Option<String>, Option<String>), String> {
        self.on_and_policy_from().map(|(on, _, from)| (on, from))
    }

    /// [`Parser::on_and_from`] with the retention policy `FROM` names.
    fn on_and_policy_from(&mut self) -> Result<OnPolicyFrom, String> {
        let on = self.on_clause()?;
        if !self.accept("FROM") {
            return Ok((on, None, None));
        }
        let (db, rp, name) = self.parse_from_name()?;
        Ok((db.or(on), rp, Some(name)))
    }

    /// A retention policy's `DURATION`: a duration literal or `INF`.
    fn policy_duration(&mut self) -> Result<u64, String> {
        match self.peek().clone() {
            Token::Ident(w) if w.eq_ignore_ascii_case("INF") => {
                self.next();
                Ok(0)
            }
            Token::Number(n) => {
                let (_, line, col) = &self.tokens[self.at];
                let d = parse_duration(&n)
                    .and_then(|d| u64::try_from(d).ok())
                    .ok_or_else(|| format!("invalid duration at line {line}, char {col}"))?;
                self.next();
                Ok(d)
            }
            _ => Err(self.error("duration")),
        }
    }

    /// `REPLICATION`'s count, as InfluxDB bounds it.
    fn replication(&mut self) -> Result<u32, String> {
        let (token, line, col) = self.tokens[self.at].clone();
        let Token::Number(n) = token else {
            return Err(self.error("integer"));
        };
        let v: i64 = n.parse().map_err(|_| self.error("integer"))?;
        if !(1..=i64::from(i32::MAX)).contains(&v) {
            return Err(format!(
                "invalid value {v}: must be 1 <= n <= 2147483647 at line {line}, char {col}"
            ));
        }
        self.next();
        Ok(v as u32)
    }

    /// `SHARD DURATION d`, after `SHARD`.
    fn shard_duration(&mut self) -> Result<u64, String> {
        self.word("DURATION")?;
        self.policy_duration()
    }

    /// After `RETENTION POLICY`: the policy's name and `ON db`.
    fn policy_name_on(&mut self) -> Result<(String, String), String> {
        let name = self.ident()?;
        self.word("ON")?;
        Ok((name, self.ident()?))
    }

    /// `CREATE RETENTION POLICY`, after its first three words.
    fn create_policy(&mut self) -> Result<Statement, String> {
        let (name, on) = self.policy_name_on()?;
        self.word("DURATION")?;
        let duration = self.policy_duration()?;
        self.word("REPLICATION")?;
        let replication = self.replication()?;
        let shard = if self.accept("SHARD") {
            Some(self.shard_duration()?)
        } else {
            None
        };
        let default = self.accept("DEFAULT");
        Ok(Statement::CreateRetentionPolicy {
            name,
            on,
            policy: PolicySpec {
                duration_ns: Some(duration),
                replication: Some(replication),
                shard_duration_ns: shard,
            },
            default,
        })
    }

    /// `ALTER RETENTION POLICY`, after its first three words: its
    /// clauses in any order, at least one.
    fn alter_policy(&mut self) -> Result<Statement, String> {
        let (name, on) = self.policy_name_on()?;
        let mut policy = PolicySpec::default();
        let mut default = false;
        let mut any = false;
        loop {
            if self.accept("DURATION") {
                policy.duration_ns = Some(self.policy_duration()?);
            } else if self.accept("REPLICATION") {
                policy.replication = Some(self.replication()?);
            } else if self.accept("SHARD") {
                policy.shard_duration_ns = Some(self.shard_duration()?);
            } else if self.accept("DEFAULT") {
                default = true;
            } else if any {
                break;
            } else {
                return Err(self.error("DURATION, REPLICATION, SHARD, DEFAULT"));
            }
            any = true;
        }
        Ok(Statement::AlterRetentionPolicy {
            name,
            on,
            policy,
            default,
        })
    }

    /// The rest of `DELETE` or `DROP SERIES`: `FROM` measurements (no
    /// retention policy, as InfluxDB: they go from every one), `WHERE`, at
    /// least one of them.
    fn delete_series(&mut self, drop: bool) -> Result<Statement, String> {
        let mut sources = Vec::new();
        let from = self.accept("FROM");
        if from {
            loop {
                let (db, rp, name) = self.source_name().map_err(|_| self.error("identifier"))?;
                if db.is_some() || rp.is_some() {
                    return Err("retention policy not supported at line 1, char 1".into());
                }
                sources.push(name);
                if !self.is_punct(',') {
                    break;
                }
                self.next();
            }
        }
        let condition = if self.accept("WHERE") {
            Some(self.or_expr()?)
        } else if !from {
            return Err(self.error("FROM, WHERE"));
        } else {
            None
        };
        Ok(Statement::DeleteSeries {
            sources,
            condition,
            drop,
        })
    }

    /// Where token `at` starts in the statement text (chars).
    fn offset_of(&self, at: usize) -> usize {
        let (_, line, col) = &self.tokens[at.min(self.tokens.len() - 1)];
        self.line_starts
            .get(line.saturating_sub(1))
            .map_or(self.source.len(), |start| start + col.saturating_sub(1))
            .min(self.source.len())
    }

    /// `CREATE CONTINUOUS QUERY`, after its first three words (the first
    /// at `self.at - 3`), as InfluxDB 1.6 checks it: an `INTO`, a `GROUP
    /// BY time(…)`, a `RESAMPLE FOR` no shorter than the interval.
    fn create_continuous_query(&mut self) -> Result<Statement, String> {
        let first = self.at.saturating_sub(3);
        let name = self.ident()?;
        self.word("ON")?;
        let on = self.ident()?;
        let (mut every, mut for_) = (None, None);
        if self.accept("RESAMPLE") {
            if !self.peek().is_word("EVERY") && !self.peek().is_word("FOR") {
                return Err(self.error("EVERY, FOR"));
            }
            if self.accept("EVERY") {
                every = Some(self.duration()?);
            }
            if self.accept("FOR") {
                for_ = Some(self.duration()?);
            }
        }
        self.word("BEGIN")?;
        if !self.peek().is_word("SELECT") {
            return Err(self.error("SELECT"));
        }
        self.next();
        self.continuous = true;
        let select = self.select()?;
        let interval = select.group_time.map_or(0, |(every, _)| every);
        if let Some(f) = for_
            && f < interval
        {
            return Err(format!(
                "FOR duration must be >= GROUP BY time duration: must be a minimum of {}, got {}",
                format_duration(interval),
                format_duration(f)
            ));
        }
        self.word("END")?;
        let end = self.offset_of(self.at);
        let start = self.offset_of(first);
        let text: String = self.source[start..end].iter().collect();
        Ok(Statement::CreateContinuousQuery {
            name,
            on,
            every,
            for_,
            select: Box::new(select),
            text: text.trim_end().to_string(),
        })
    }

    /// `CREATE DATABASE`'s `WITH` clauses, in InfluxDB's order, at least one.
    fn database_policy(&mut self) -> Result<DatabasePolicy, String> {
        let mut with = DatabasePolicy::default();
        let mut any = false;
        if self.accept("DURATION") {
            with.spec.duration_ns = Some(self.policy_duration()?);
            any = true;
        }
        if self.accept("REPLICATION") {
            with.spec.replication = Some(self.replication()?);
            any = true;
        }
        if self.accept("SHARD") {
            with.spec.shard_duration_ns = Some(self.shard_duration()?);
            any = true;
        }
        if self.accept("NAME") {
            with.name = Some(self.ident()?);
            any = true;
        }
        if !any {
            return Err(self.error("DURATION, NAME, REPLICATION, SHARD"));
        }
        Ok(with)
    }

    /// After `SHOW`: what a `… [EXACT] CARDINALITY` statement counts and
    /// whether exactly, or `None` (nothing taken) for another statement.
    fn cardinality_head(&mut self) -> Option<(CardinalityOf, bool)> {
        let word = |p: &Parser, at: usize, w: &str| {
            p.tokens.get(p.at + at).is_some_and(|t| t.0.is_word(w))
        };
        let (of, words) = if word(self, 0, "SERIES") {
            (CardinalityOf::Series, 1)
        } else if word(self, 0, "MEASUREMENT") {
            (CardinalityOf::Measurements, 1)
        } else if word(self, 0, "FIELD") && word(self, 1, "KEY") {
            (CardinalityOf::FieldKeys, 2)
        } else if word(self, 0, "TAG") && word(self, 1, "KEY") {
            (CardinalityOf::TagKeys, 2)
        } else if word(self, 0, "TAG") && word(self, 1, "VALUES") {
            (CardinalityOf::TagValues(NameMatch::In(Vec::new())), 2)
        } else {
            return None;
        };
        let exact = usize::from(word(self, words, "EXACT"));
        if !word(self, words + exact, "CARDINALITY") {
            return None;
        }
        for _ in 0..words + exact + 1 {
            self.next();
        }
        Some((of, exact == 1))
    }

    /// The rest of a `SHOW … CARDINALITY` statement: `[ON db] [FROM m]
    /// [WITH KEY …] [WHERE tags] [LIMIT n] [OFFSET n]`.
    fn cardinality(&mut self, of: CardinalityOf, exact: bool) -> Result<Statement, String> {
        let (on, from) = self.on_and_from()?;
        let of = match of {
            CardinalityOf::TagValues(_) => {
                self.word("WITH")?;
                self.word("KEY")?;
                CardinalityOf::TagValues(self.name_match()?)
            }
            of => of,
        };
        let condition = self.show_condition()?;
        let paging = self.paging()?;
        Ok(Statement::ShowCardinality {
            of,
            exact,
            on,
            from,
            condition,
            paging,
        })
    }

    /// `[LIMIT n] [OFFSET m]` of a `SHOW` statement.
    fn paging(&mut self) -> Result<Paging, String> {
        let mut paging = Paging::default();
        if self.accept("LIMIT") {
            paging.limit = Some(self.count()?);
        }
        if self.accept("OFFSET") {
            paging.offset = self.count()?;
        }
        Ok(paging)
    }

    /// `[WHERE condition]` of a `SHOW` statement.
    fn show_condition(&mut self) -> Result<Option<Expr>, String> {
        if self.accept("WHERE") {
            Ok(Some(self.or_expr()?))
        } else {
            Ok(None)
        }
    }

    /// The names after `WITH KEY` or `WITH MEASUREMENT`.
    fn name_match(&mut self) -> Result<NameMatch, String> {
        let op = self.peek().clone();
        match op {
            Token::Op("=") => {
                self.next();
                Ok(NameMatch::In(vec![self.ident()?]))
            }
            Token::Op("!=" | "<>") => {
                self.next();
                Ok(NameMatch::NotEq(self.ident()?))
            }
            Token::Op(op @ ("=~" | "!~")) => {
                self.next();
                let Token::Regex(re) = self.peek().clone() else {
                    return Err(self.error("regex"));
                };
                self.next();
                Ok(if op == "=~" {
                    NameMatch::Regex(re)
                } else {
                    NameMatch::NotRegex(re)
                })
            }
            t if t.is_word("IN") => {
                self.next();
                self.punct('(')?;
                let mut keys = vec![self.ident()?];
                while self.is_punct(',') {
                    self.next();
                    keys.push(self.ident()?);
                }
                self.punct(')')?;
                Ok(NameMatch::In(keys))
            }
            _ => Err(self.error("=, !=, <>, =~, !~, IN")),
        }
    }

    /// Skips to the end of this statement, for one halite does not answer.
    fn rest_unsupported(&mut self, head: &str) -> Statement {
        while !matches!(self.peek(), Token::Semicolon | Token::Eof) {
            self.next();
        }
        Statement::Unsupported(head.to_string())
    }

    fn statement(&mut self) -> Result<Statement, String> {
        let first = self.peek().clone();
        if first.is_word("CREATE") {
            self.next();
            if self.accept("DATABASE") {
                let name = self.ident()?;
                let with = if self.accept("WITH") {
                    Some(self.database_policy()?)
                } else {
                    None
                };
                return Ok(Statement::CreateDatabase { name, with });
            }
            if self.accept("RETENTION") {
                self.word("POLICY")?;
                return self.create_policy();
            }
            if self.accept("CONTINUOUS") {
                self.word("QUERY")?;
                return self.create_continuous_query();
            }
            return Ok(self.rest_unsupported("CREATE"));
        }
        if first.is_word("ALTER") {
            self.next();
            if self.accept("RETENTION") {
                self.word("POLICY")?;
                return self.alter_policy();
            }
            return Ok(self.rest_unsupported("ALTER"));
        }
        if first.is_word("DROP") {
            self.next();
            if self.accept("DATABASE") {
                let name = self.ident()?;
                return Ok(Statement::DropDatabase { name });
            }
            if self.accept("MEASUREMENT") {
                let name = self.ident()?;
                return Ok(Statement::DropMeasurement { name });
            }
            if self.accept("RETENTION") {
                self.word("POLICY")?;
                let (name, on) = self.policy_name_on()?;
                return Ok(Statement::DropRetentionPolicy { name, on });
            }
            if self.accept("SERIES") {
                return self.delete_series(true);
            }
            if self.accept("CONTINUOUS") {
                self.word("QUERY")?;
                let name = self.ident()?;
                self.word("ON")?;
                let on = self.ident()?;
                return Ok(Statement::DropContinuousQuery { name, on });
            }
            return Ok(self.rest_unsupported("DROP"));
        }
        if first.is_word("DELETE") {
            self.next();
            return self.delete_series(false);
        }
        if first.is_word("SHOW") {
            self.next();
            let what = self.peek().clone();
            if what.is_word("DATABASES") {
                self.next();
                return Ok(Statement::ShowDatabases);
            }
            if what.is_word("CONTINUOUS") {
                self.next();
                self.word("QUERIES")?;
                return Ok(Statement::ShowContinuousQueries);
            }
            if what.is_word("RETENTION") {
                self.next();
                self.word("POLICIES")?;
                let on = self.on_clause()?;
                return Ok(Statement::ShowRetentionPolicies { on });
            }
            if let Some((of, exact)) = self.cardinality_head() {
                return self.cardinality(of, exact);
            }
            if what.is_word("MEASUREMENTS") {
                self.next();
                let on = self.on_clause()?;
                let with = if self.accept("WITH") {
                    self.word("MEASUREMENT")?;
                    if !matches!(self.peek(), Token::Op("=" | "=~")) {
                        return Err(self.error("=, =~"));
                    }
                    Some(self.name_match()?)
                } else {
                    None
                };
                let condition = self.show_condition()?;
                let paging = self.paging()?;
                return Ok(Statement::ShowMeasurements {
                    on,
                    with,
                    condition,
                    paging,
                });
            }
            if what.is_word("TAG") {
                self.next();
                if self.accept("KEYS") {
                    let (on, from) = self.on_and_from()?;
                    let condition = self.show_condition()?;
                    let paging = self.paging()?;
                    return Ok(Statement::ShowTagKeys {
                        on,
                        from,
                        condition,
                        paging,
                    });
                }
                self.word("VALUES")?;
                let (on, from) = self.on_and_from()?;
                self.word("WITH")?;
                self.word("KEY")?;
                let keys = self.name_match()?;
                let condition = self.show_condition()?;
                let paging = self.paging()?;
                return Ok(Statement::ShowTagValues {
                    on,
                    from,
                    keys,
                    condition,
                    paging,
                });
            }
            if what.is_word("FIELD") {
                self.next();
                self.word("KEYS")?;
                let (on, retention_policy, from) = self.on_and_policy_from()?;
                let paging = self.paging()?;
                return Ok(Statement::ShowFieldKeys {
                    on,
                    retention_policy,
                    from,
                    paging,
                });
            }
            if what.is_word("SERIES") {
                self.next();
                let (on, from) = self.on_and_from()?;
                let condition = self.show_condition()?;
                let paging = self.paging()?;
                return Ok(Statement::ShowSeries {
                    on,
                    from,
                    condition,
                    paging,
                });
            }
            if let Token::Ident(w) = what {
                return Ok(self.rest_unsupported(&format!("SHOW {}", w.to_ascii_uppercase())));
            }
            return Err(self.error(
                "CONTINUOUS, DATABASES, DIAGNOSTICS, FIELD, GRANTS, MEASUREMENT, MEASUREMENTS, QUERIES, RETENTION, SERIES, SHARD, SHARDS, STATS, SUBSCRIPTIONS, TAG, USERS",
            ));
        }
        if first.is_word("SELECT") {
            self.next();
            return self.select().map(|s| Statement::Select(Box::new(s)));
        }
        for head in ["EXPLAIN", "GRANT", "REVOKE", "SET", "KILL"] {
            if first.is_word(head) {
                return Ok(self.rest_unsupported(head));
            }
        }
        Err(self
            .error("SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL"))
    }
}

impl Parser {
    fn punct(&mut self, c: char) -> Result<(), String> {
        if matches!(self.peek(), Token::Punct(p) if *p == c) {
            self.next();
            Ok(())
        } else {
            Err(self.error(&c.to_string()))
        }
    }

    fn is_punct(&self, c: char) -> bool {
        matches!(self.peek(), Token::Punct(p) if *p == c)
    }

    fn select(&mut self) -> Result<Select, String> {
        // A continuous query's statement (not a subquery in it) needs an
        // `INTO` and a `GROUP BY time`.
        let continuous = std::mem::take(&mut self.continuous);
        let mut fields = vec![self.select_field()?];
        while self.is_punct(',') {
            self.next();
            fields.push(self.select_field()?);
        }
        // Time is always answered: naming it only names its column.
        let mut time_column = "time".to_string();
        fields.retain(|f| match (&f.expr, &f.alias) {
            (SelectExpr::Column(c), alias) if c == "time" => {
                if let Some(a) = alias {
                    time_column = a.clone();
                }
                false
            }
            _ => true,
        });
        if continuous && !self.peek().is_word("INTO") {
            return Err(self.error("INTO"));
        }
        let into = if self.accept("INTO") {
            Some(self.target_of_into()?)
        } else {
            None
        };
        self.word("FROM")?;
        let source_at = self.at;
        let mut sources = Vec::new();
        let (mut database, mut retention_policy) = (None, None);
        let mut subquery = None;
        loop {
            if self.is_punct('(') {
                subquery = Some(Box::new(self.subquery()?));
                if self.is_punct(',') || !sources.is_empty() {
                    return Err(
                        "a subquery beside other sources is not answered by halite yet: read one subquery"
                            .into(),
                    );
                }
                break;
            }
            let (db, rp, measurement) = self.source_name().map_err(|_| self.error("identifier"))?;
            if sources.is_empty() {
                (database, retention_policy) = (db.clone(), rp.clone());
            }
            sources.push(FromSource {
                database: db,
                retention_policy: rp,
                measurement,
            });
            if !self.is_punct(',') {
                break;
            }
            self.next();
        }
        let from = match sources.as_slice() {
            [
                FromSource {
                    measurement: FromName::Name(name),
                    ..
                },
            ] => name.clone(),
            _ => String::new(),
        };
        if !from.is_empty() {
            sources.clear();
        }
        let mut s = Select {
            fields,
            into,
            database,
            retention_policy,
            from,
            sources,
            subquery,
            condition: None,
            group_time: None,
            group_tags: GroupTags::None,
            fill: Fill::Null,
            descending: false,
            limit: None,
            offset: 0,
            slimit: None,
            soffset: 0,
            time_column,
        };
        if self.accept("WHERE") {
            s.condition = Some(self.or_expr()?);
        }
        if self.accept("GROUP") {
            self.word("BY")?;
            loop {
                if self.peek().is_word("time") && self.tokens[self.at + 1].0 == Token::Punct('(') {
                    self.next();
                    self.punct('(')?;
                    let every = self.duration()?;
                    let offset = if self.is_punct(',') {
                        self.next();
                        self.signed_duration()?
                    } else {
                        0
                    };
                    self.punct(')')?;
                    if every <= 0 {
                        return Err("GROUP BY time interval must be positive".into());
                    }
                    // As InfluxDB does: an offset is the same one modulo
                    // the interval, and within it the bucket arithmetic
                    // cannot overflow.
                    s.group_time = Some((every, offset.rem_euclid(every)));
                } else if self.is_punct('*') {
                    self.next();
                    s.group_tags = GroupTags::All;
                } else {
                    let tag = self.ident()?;
                    self.cast()?;
                    match &mut s.group_tags {
                        GroupTags::List(l) => l.push(tag),
                        GroupTags::None => s.group_tags = GroupTags::List(vec![tag]),
                        GroupTags::All => {}
                    }
                }
                if !self.is_punct(',') {
                    break;
                }
                self.next();
            }
        }
        if self.accept("fill") {
            self.punct('(')?;
            s.fill = match self.peek().clone() {
                t if t.is_word("null") => Fill::Null,
                t if t.is_word("none") => Fill::None,
                t if t.is_word("previous") => Fill::Previous,
                t if t.is_word("linear") => Fill::Linear,
                Token::Number(_) | Token::Punct('-') => Fill::Value(self.number()?),
                _ => return Err(self.error("null, none, previous, linear or a number")),
            };
            if !matches!(s.fill, Fill::Value(_)) {
                self.next();
            }
            self.punct(')')?;
        }
        if self.accept("ORDER") {
            self.word("BY")?;
            // `ORDER BY time DESC`, or bare `ORDER BY DESC` (published
            // Telegraf dashboards write `ORDER BY asc`); `time` as
            // InfluxDB takes it, in lower case or quoted.
            if !self.peek().is_word("ASC") && !self.peek().is_word("DESC") {
                if !matches!(self.peek(), Token::Ident(w) | Token::Quoted(w) if w == "time") {
                    return Err("only ORDER BY time supported at this time".into());
                }
                self.next();
            }
            if self.accept("DESC") {
                s.descending = true;
            } else {
                self.accept("ASC");
            }
            if self.is_punct(',') {
                return Err("only ORDER BY time supported at this time".into());
            }
        }
        loop {
            if self.accept("LIMIT") {
                s.limit = Some(self.count()?);
            } else if self.accept("OFFSET") {
                s.offset = self.count()?;
            } else if self.accept("SLIMIT") {
                s.slimit = Some(self.count()?);
            } else if self.accept("SOFFSET") {
                s.soffset = self.count()?;
            } else {
                break;
            }
        }
        // (A raw one InfluxDB takes, and refuses to run.)
        if continuous && s.group_time.is_none() && s.calls_functions() {
            let (t, line, col) = &self.tokens[source_at];
            return Err(format!(
                "found {}, expected GROUP BY time(...) at line {line}, char {col}",
                t.describe()
            ));
        }
        if s.fill != Fill::Null && s.group_time.is_none() {
            return Err("fill(none) must be used with a function".into());
        }
        Ok(s)
    }

    /// `(SELECT …)` in a `FROM`, nested at most [`MAX_SUBQUERY_DEPTH`]
    /// deep.
    fn subquery(&mut self) -> Result<Select, String> {
        if self.subqueries == MAX_SUBQUERY_DEPTH {
            let (_, line, col) = &self.tokens[self.at];
            return Err(format!(
                "subqueries nest more than {MAX_SUBQUERY_DEPTH} deep at line {line}, char {col} \
                 (the limit); write them with fewer"
            ));
        }
        self.punct('(')?;
        self.word("SELECT")?;
        self.subqueries += 1;
        let inner = self.select();
        self.subqueries -= 1;
        let inner = inner?;
        self.punct(')')?;
        Ok(inner)
    }

    /// `INTO`'s target: `m`, `rp.m`, `db.rp.m`, `db..m`, with `:MEASUREMENT`
    /// in `m`'s place for the measurement each row came from.
    fn target_of_into(&mut self) -> Result<IntoTarget, String> {
        let mut parts = Vec::new();
        let measurement = loop {
            if self.is_punct(':') {
                self.next();
                if !self.peek().is_word("MEASUREMENT") {
                    return Err(self.error("MEASUREMENT"));
                }
                self.next();
                break None;
            }
            parts.push(self.ident()?);
            if !self.is_punct('.') {
                break parts.pop();
            }
            self.next();
            if self.is_punct('.') {
                parts.push(String::new());
                self.next();
            }
        };
        let retention_policy = parts.pop().filter(|rp| !rp.is_empty());
        let database = parts.pop();
        if !parts.is_empty() {
            return Err(
                "a measurement is named by at most database.retention_policy.measurement".into(),
            );
        }
        Ok(IntoTarget {
            database,
            retention_policy,
            measurement,
        })
    }

    /// A measurement of a `FROM`: `m`, `rp.m`, `db.rp.m` or `db..m` (the
    /// database and the retention policy, if named), or a pattern in its
    /// place (`/^cpu/`, `db.rp./^cpu/`).
    fn source_name(&mut self) -> Result<(Option<String>, Option<String>, FromName), String> {
        let mut parts = Vec::new();
        let measurement = loop {
            if let Token::Regex(re) = self.peek().clone() {
                self.next();
                break FromName::Regex(re);
            }
            parts.push(self.ident()?);
            if !self.is_punct('.') {
                break FromName::Name(parts.pop().unwrap_or_default());
            }
            self.next();
            if self.is_punct('.') {
                // `db..m`: the retention policy left out.
                parts.push(String::new());
                self.next();
            }
        };
        let rp = parts.pop().filter(|rp| !rp.is_empty());
        match parts.len() {
            0 => Ok((None, rp, measurement)),
            1 => Ok((parts.pop(), rp, measurement)),
            _ => Err(
                "a measurement is named by at most database.retention_policy.measurement".into(),
            ),
        }
    }

    /// [`Self::source_name`] where a pattern is not taken (`SHOW … FROM`).
    fn parse_from_name(&mut self) -> Result<(Option<String>, Option<String>, String), String> {
        match self.source_name()? {
            (db, rp, FromName::Name(name)) => Ok((db, rp, name)),
            (_, _, FromName::Regex(re)) => Err(format!(
                "FROM /{}/ is not answered by halite yet: name the measurement",
                crate::codec::quote_prefix(&re)
            )),
        }
    }

    fn select_field(&mut self) -> Result<SelectField, String> {
        let mut nodes = 0;
        let expr = match self.field_expr(0, &mut nodes)? {
            FieldExpr::Wildcard => SelectExpr::Wildcard,
            FieldExpr::Regex(re) => SelectExpr::Matching(re),
            FieldExpr::Column(c) => SelectExpr::Column(c),
            e => simple_call(&e).unwrap_or(SelectExpr::Expr(e)),
        };
        let alias = if self.accept("AS") {
            Some(self.ident()?)
        } else {
            None
        };
        Ok(SelectField { expr, alias })
    }

    /// A select-list expression whose operators bind at least as tightly
    /// as `min_rank`; `nodes` counts its operators and calls.
    fn field_expr(&mut self, min_rank: u8, nodes: &mut usize) -> Result<FieldExpr, String> {
        let mut lhs = self.field_unary(nodes)?;
        while let Some((op, rank)) = match self.peek() {
            Token::Punct(c) => BinaryOp::of(*c),
            _ => None,
        } {
            if rank < min_rank {
                break;
            }
            self.next();
            self.count_node(nodes)?;
            let rhs = self.field_expr(rank + 1, nodes)?;
            lhs = FieldExpr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok(lhs)
    }

    fn field_unary(&mut self, nodes: &mut usize) -> Result<FieldExpr, String> {
        match self.peek().clone() {
            Token::Punct('(') => {
                self.nest_field()?;
                self.next();
                self.depth += 1;
                let e = self.field_expr(0, nodes)?;
                self.depth -= 1;
                self.punct(')')?;
                Ok(e)
            }
            Token::Punct('-') => {
                self.next();
                match self.peek().clone() {
                    Token::Number(n) => {
                        let literal = self.field_number(&n)?;
                        self.next();
                        Ok(match literal {
                            FieldExpr::Integer(i) => FieldExpr::Integer(-i),
                            FieldExpr::Number(v) => FieldExpr::Number(-v),
                            FieldExpr::Duration(d) => FieldExpr::Duration(-d),
                            other => other,
                        })
                    }
                    _ => {
                        self.count_node(nodes)?;
                        let e = self.field_unary(nodes)?;
                        Ok(FieldExpr::Binary {
                            op: BinaryOp::Mul,
                            lhs: Box::new(FieldExpr::Integer(-1)),
                            rhs: Box::new(e),
                        })
                    }
                }
            }
            Token::Punct('*') => {
                self.next();
                Ok(FieldExpr::Wildcard)
            }
            Token::Regex(re) => {
                self.next();
                Ok(FieldExpr::Regex(re))
            }
            Token::Number(n) => {
                let literal = self.field_number(&n)?;
                self.next();
                Ok(literal)
            }
            Token::Str(s) => {
                self.next();
                Ok(FieldExpr::Str(s))
            }
            Token::Ident(w)
                if w.eq_ignore_ascii_case("true") || w.eq_ignore_ascii_case("false") =>
            {
                self.next();
                Ok(FieldExpr::Bool(w.eq_ignore_ascii_case("true")))
            }
            Token::Ident(_) | Token::Quoted(_) => {
                let name = self.ident()?;
                if !self.is_punct('(') {
                    self.cast()?;
                    return Ok(FieldExpr::Column(name));
                }
                self.nest_field()?;
                self.next();
                self.count_node(nodes)?;
                self.depth += 1;
                let mut args = Vec::new();
                if !self.is_punct(')') {
                    loop {
                        args.push(self.field_expr(0, nodes)?);
                        if !self.is_punct(',') {
                            break;
                        }
                        self.next();
                    }
                }
                self.depth -= 1;
                self.punct(')')?;
                Ok(FieldExpr::Call {
                    func: name.to_ascii_lowercase(),
                    args,
                })
            }
            _ => Err(self.error("identifier, string, number, bool")),
        }
    }

    /// `::field`, `::tag`, `::integer`, … after a name, which Grafana's
    /// editor writes: taken and not kept (a name is a field or a tag of
    /// one type here; InfluxDB reads the named one where both are).
    fn cast(&mut self) -> Result<(), String> {
        if !(self.is_punct(':') && self.tokens[self.at + 1].0 == Token::Punct(':')) {
            return Ok(());
        }
        self.next();
        self.next();
        const TYPES: [&str; 7] = [
            "float", "integer", "unsigned", "string", "boolean", "field", "tag",
        ];
        if TYPES.iter().any(|t| self.peek().is_word(t)) {
            self.next();
            return Ok(());
        }
        Err(self.error("float, integer, unsigned, string, boolean, field, tag"))
    }

    /// Refuses a parenthesis or call nested past [`MAX_CONDITION_DEPTH`]
    /// in a select-list expression.
    fn nest_field(&self) -> Result<(), String> {
        if self.depth == MAX_CONDITION_DEPTH {
            let (_, line, col) = &self.tokens[self.at];
            return Err(format!(
                "the field nests parentheses or calls more than {MAX_CONDITION_DEPTH} deep at \
                 line {line}, char {col} (the limit); write it with fewer"
            ));
        }
        Ok(())
    }

    /// Counts one more operator or call of a select-list expression,
    /// refusing the one past [`MAX_FIELD_NODES`].
    fn count_node(&self, nodes: &mut usize) -> Result<(), String> {
        *nodes += 1;
        if *nodes > MAX_FIELD_NODES {
            let (_, line, col) = &self.tokens[self.at];
            return Err(format!(
                "a field holds more than {MAX_FIELD_NODES} operators and calls at line {line}, \
                 char {col} (the limit); write it with fewer"
            ));
        }
        Ok(())
    }

    /// A number token of the select list: an integer, a float or a
    /// duration (`1s`), as InfluxQL's scanner tells them apart.
    fn field_number(&self, n: &str) -> Result<FieldExpr, String> {
        if let Ok(i) = n.parse::<i64>() {
            return Ok(FieldExpr::Integer(i));
        }
        if n.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'e' || b == b'E')
            && let Ok(v) = n.parse::<f64>()
        {
            return Ok(FieldExpr::Number(v));
        }
        parse_duration(n)
            .map(FieldExpr::Duration)
            .ok_or_else(|| self.error("number"))
    }

    fn count(&mut self) -> Result<usize, String> {
        match self.peek().clone() {
            Token::Number(n) => {
                let v = n.parse().map_err(|_| self.error("integer"))?;
                self.next();
                Ok(v)
            }
            _ => Err(self.error("integer")),
        }
    }

    fn number(&mut self) -> Result<f64, String> {
        let negative = if self.is_punct('-') {
            self.next();
            true
        } else {
            false
        };
        match self.peek().clone() {
            Token::Number(n) => {
                let v: f64 = n.parse().map_err(|_| self.error("number"))?;
                self.next();
                Ok(if negative { -v } else { v })
            }
            _ => Err(self.error("number")),
        }
    }

    fn duration(&mut self) -> Result<i64, String> {
        match self.peek().clone() {
            Token::Number(n) => {
                let d = parse_duration(&n).ok_or_else(|| self.error("duration"))?;
                self.next();
                Ok(d)
            }
            _ => Err(self.error("duration")),
        }
    }

    fn signed_duration(&mut self) -> Result<i64, String> {
        if self.is_punct('-') {
            self.next();
            return Ok(-self.duration()?);
        }
        self.duration()
    }

    fn or_expr(&mut self) -> Result<Expr, String> {
        let first = self.and_expr()?;
        if !self.peek().is_word("OR") {
            return Ok(first);
        }
        let mut terms = Vec::new();
        push_term(&mut terms, first, Junction::Or);
        while self.accept("OR") {
            let term = self.and_expr()?;
            push_term(&mut terms, term, Junction::Or);
        }
        Ok(Expr::Or(terms))
    }

    fn and_expr(&mut self) -> Result<Expr, String> {
        let first = self.primary()?;
        if !self.peek().is_word("AND") {
            return Ok(first);
        }
        let mut terms = Vec::new();
        push_term(&mut terms, first, Junction::And);
        while self.accept("AND") {
            let term = self.primary()?;
            push_term(&mut terms, term, Junction::And);
        }
        Ok(Expr::And(terms))
    }

    fn primary(&mut self) -> Result<Expr, String> {
        if self.is_punct('(') {
            if self.depth == MAX_CONDITION_DEPTH {
                let (_, line, col) = &self.tokens[self.at];
                return Err(format!(
                    "the condition nests parentheses more than {MAX_CONDITION_DEPTH} deep at \
                     line {line}, char {col} (the limit); write it with fewer"
                ));
            }
            self.next();
            self.depth += 1;
            let e = self.or_expr()?;
            self.depth -= 1;
            self.punct(')')?;
            return Ok(e);
        }
        // InfluxDB reads a condition's left side as any expression.
        let lhs = self
            .ident()
            .map_err(|_| self.error("identifier, string, number, bool"))?;
        self.cast()?;
        let op = match self.peek() {
            Token::Op("=") => CompareOp::Eq,
            Token::Op("!=" | "<>") => CompareOp::NotEq,
            Token::Op("<") => CompareOp::Lt,
            Token::Op("<=") => CompareOp::LtEq,
            Token::Op(">") => CompareOp::Gt,
            Token::Op(">=") => CompareOp::GtEq,
            Token::Op("=~") => CompareOp::Match,
            Token::Op("!~") => CompareOp::NotMatch,
            _ => return Err(self.error("=, !=, <>, <, <=, >, >=, =~, !~")),
        };
        self.next();
        let is_time = lhs.eq_ignore_ascii_case("time");
        if matches!(op, CompareOp::Match | CompareOp::NotMatch) {
            let Token::Regex(re) = self.peek().clone() else {
                return Err(self.error("regex"));
            };
            self.next();
            return Ok(Expr::Compare {
                lhs,
                op,
                rhs: Operand::Regex(re),
            });
        }
        let rhs = self.operand(is_time)?;
        Ok(Expr::Compare { lhs, op, rhs })
    }

    /// The right side of a comparison; with `time` on the left, a point
    /// in time (and `± duration` after it).
    fn operand(&mut self, time: bool) -> Result<Operand, String> {
        let t = self.peek().clone();
        let base = match t {
            Token::Ident(w) if w.eq_ignore_ascii_case("now") => {
                self.next();
                self.punct('(')?;
                self.punct(')')?;
                Operand::Time(now_ns())
            }
            Token::Ident(w)
                if w.eq_ignore_ascii_case("true") || w.eq_ignore_ascii_case("false") =>
            {
                self.next();
                Operand::Bool(w.eq_ignore_ascii_case("true"))
            }
            Token::Str(s) => {
                self.next();
                if time {
                    Operand::Time(parse_rfc3339(&s).ok_or_else(|| {
                        format!("invalid time string: {:?}", crate::codec::quote_prefix(&s))
                    })?)
                } else {
                    Operand::Str(s)
                }
            }
            Token::Number(n) if time => {
                self.next();
                Operand::Time(time_number(&n)?)
            }
            // Before 1970: `time > -1000000000`, `time >= -1h`.
            Token::Punct('-') if time => {
                self.next();
                match self.peek().clone() {
                    Token::Number(n) => {
                        self.next();
                        Operand::Time(-time_number(&n)?)
                    }
                    _ => return Err(self.error("number")),
                }
            }
            Token::Number(_) | Token::Punct('-') => Operand::Number(self.number()?),
            _ => return Err(self.error("identifier, string, number, bool")),
        };
        let Operand::Time(mut at) = base else {
            return Ok(base);
        };
        loop {
            if self.is_punct('+') {
                self.next();
                at = at
                    .checked_add(self.duration()?)
                    .ok_or("invalid time: out of range")?;
            } else if self.is_punct('-') {
                self.next();
                at = at
                    .checked_sub(self.duration()?)
                    .ok_or("invalid time: out of range")?;
            } else {
                return Ok(Operand::Time(at));
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Junction {
    And,
    Or,
}

/// `func(field)` or `func(field, number)` of a function that takes a
/// field (not a call of a call), as the aggregate select answers it.
/// The call `e` as the select list's own kinds of calls, when it is one
/// of them as written; anything else (a wrong argument among them) is an
/// expression, checked when the statement runs with InfluxDB's errors.
fn simple_call(e: &FieldExpr) -> Option<SelectExpr> {
    let FieldExpr::Call { func, args } = e else {
        return None;
    };
    if TRANSFORMS.contains(&func.as_str()) || MATH.contains(&func.as_str()) {
        return None;
    }
    match (func.as_str(), args.as_slice()) {
        ("distinct", [FieldExpr::Column(c)]) => {
            return Some(SelectExpr::Distinct {
                field: c.clone(),
                count: false,
            });
        }
        ("count", [FieldExpr::Call { func: inner, args }]) if inner == "distinct" => {
            return match args.as_slice() {
                [FieldExpr::Column(c)] => Some(SelectExpr::Distinct {
                    field: c.clone(),
                    count: true,
                }),
                _ => None,
            };
        }
        ("top" | "bottom", [FieldExpr::Column(field), tags @ .., FieldExpr::Integer(n)])
            if *n >= 1 =>
        {
            let tags = tags
                .iter()
                .map(|t| match t {
                    FieldExpr::Column(t) => Some(t.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<String>>>()?;
            return Some(SelectExpr::Rank {
                bottom: func == "bottom",
                field: field.clone(),
                tags,
                n: usize::try_from(*n).ok()?,
            });
        }
        ("top" | "bottom" | "distinct", _) => return None,
        _ => {}
    }
    let arg = match (func.as_str(), args.get(1)) {
        (_, None) => None,
        ("integral", Some(FieldExpr::Duration(d))) if *d > 0 => Some(*d as f64),
        ("integral", Some(_)) => return None,
        (_, Some(FieldExpr::Integer(i))) => Some(*i as f64),
        (_, Some(FieldExpr::Number(v))) => Some(*v),
        (_, Some(_)) => return None,
    };
    if args.len() > 2 {
        return None;
    }
    let func = func.clone();
    Some(match args.first()? {
        FieldExpr::Column(c) => SelectExpr::Call {
            func,
            field: c.clone(),
            arg,
        },
        FieldExpr::Wildcard => SelectExpr::CallEach {
            func,
            pattern: None,
            arg,
        },
        FieldExpr::Regex(re) => SelectExpr::CallEach {
            func,
            pattern: Some(re.clone()),
            arg,
        },
        _ => return None,
    })
}

/// Adds `term` to a chain of `junction`s, its own terms in its place
/// when it is a chain of the same (`(a OR b) OR c` is `a OR b OR c`).
fn push_term(terms: &mut Vec<Expr>, term: Expr, junction: Junction) {
    match (term, junction) {
        (Expr::And(inner), Junction::And) | (Expr::Or(inner), Junction::Or) => {
            terms.extend(inner);
        }
        (other, _) => terms.push(other),
    }
}

/// A time written as a number: nanoseconds, or with a unit (`1596240000000ms`).
fn time_number(n: &str) -> Result<i64, String> {
    if n.bytes().all(|b| b.is_ascii_digit()) {
        n.parse()
            .map_err(|_| format!("invalid time: {}", crate::codec::quote_prefix(n)))
    } else {
        parse_duration(n).ok_or_else(|| format!("invalid time: {}", crate::codec::quote_prefix(n)))
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `10s`, `1596240000000ms`, `1h`, `2d` (InfluxQL's units) in
/// nanoseconds; a bare number is nanoseconds.
pub fn parse_duration(text: &str) -> Option<i64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = text.split_at(digits);
    let n: i64 = n.parse().ok()?;
    let scale: i64 = match unit {
        "" | "ns" => 1,
        "u" | "µ" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "w" => 604_800_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// A duration as InfluxQL writes it: the largest unit that divides it.
pub fn format_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    for (unit, size) in [
        ("w", 604_800_000_000_000),
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("u", 1_000),
    ] {
        if ns % size == 0 {
            return format!("{}{unit}", ns / size);
        }
    }
    format!("{ns}ns")
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2020-01-01T00:00:00Z`, with fractional seconds and a `±hh:mm` offset,
/// or a date alone, in nanoseconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
    {
        return None;
    }
    let days = days_from_civil(y, m, d);
    if b.len() == 10 {
        return days.checked_mul(86_400_000_000_000);
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (hh, mm, ss) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let digits = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = num(at, digits)? * 10i64.pow(9 - digits as u32);
        at += digits;
    }
    let offset_secs = match b.get(at) {
        Some(b'Z' | b'z') if at + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if at + 6 == b.len() && b[at + 3] == b':' => {
            let o = num(at + 1, 2)? * 3600 + num(at + 4, 2)? * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss - offset_secs;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

pub use crate::clock::format_rfc3339;

/// Parses a `/query` text: statements separated by `;`. The error is
/// InfluxDB's parse error text (without its "error parsing query: ").
pub fn parse(text: &str) -> Result<Vec<Statement>, String> {
    let tokens = lex(text)?;
    let source: Vec<char> = text.chars().collect();
    let line_starts = std::iter::once(0)
        .chain(
            source
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == '\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let mut p = Parser {
        tokens,
        source,
        line_starts,
        continuous: false,
        at: 0,
        depth: 0,
        subqueries: 0,
    };
    let mut out = Vec::new();
    loop {
        while matches!(p.peek(), Token::Semicolon) {
            p.next();
        }
        if matches!(p.peek(), Token::Eof) {
            break;
        }
        out.push(p.statement()?);
        match p.peek() {
            Token::Semicolon | Token::Eof => {}
            _ => return Err(p.error(";")),
        }
    }
    if out.is_empty() {
        return Err(p.error(
            "SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one SELECT statement `q` parses into.
    fn only_select(q: &str) -> Select {
        let parsed = parse(q).unwrap_or_else(|e| panic!("{q}: {e}"));
        let [Statement::Select(s)] = parsed.as_slice() else {
            panic!("{q}: {parsed:?}");
        };
        (**s).clone()
    }

    #[test]
    fn the_statements_telegraf_and_grafana_send() {
        assert_eq!(
            parse(r#"CREATE DATABASE "telegraf""#),
            Ok(vec![Statement::CreateDatabase {
                name: "telegraf".into(),
                with: None,
            }])
        );
        assert_eq!(
            parse("SHOW measurements"),
            Ok(vec![Statement::ShowMeasurements {
                on: None,
                with: None,
                condition: None,
                paging: Paging::default(),
            }])
        );
        assert_eq!(
            parse(r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" LIMIT 5; show databases"#),
            Ok(vec![
                Statement::ShowTagValues {
                    on: None,
                    from: Some("cpu".into()),
                    keys: NameMatch::In(vec!["host".into()]),
                    condition: None,
                    paging: Paging {
                        limit: Some(5),
                        offset: 0
                    },
                },
                Statement::ShowDatabases
            ])
        );
        assert_eq!(
            parse(r#"SHOW TAG VALUES ON db FROM "autogen"."cpu" WITH KEY IN ("a", b)"#),
            Ok(vec![Statement::ShowTagValues {
                on: Some("db".into()),
                from: Some("cpu".into()),
                keys: NameMatch::In(vec!["a".into(), "b".into()]),
                condition: None,
                paging: Paging::default(),
            }])
        );
        assert!(matches!(
            parse("SELECT mean(v) FROM cpu").as_deref(),
            Ok([Statement::Select(_)])
        ));
        assert_eq!(
            parse("DROP MEASUREMENT cpu"),
            Ok(vec![Statement::DropMeasurement { name: "cpu".into() }])
        );
        assert_eq!(
            parse("DROP SERIES FROM cpu"),
            Ok(vec![Statement::DeleteSeries {
                sources: vec![FromName::Name("cpu".into())],
                condition: None,
                drop: true,
            }])
        );
        assert_eq!(
            parse("DROP SUBSCRIPTION s ON db.rp"),
            Ok(vec![Statement::Unsupported("DROP".into())])
        );
        assert!(matches!(
            parse("CREATE DATABASE d WITH DURATION 3d NAME three").as_deref(),
            Ok([Statement::CreateDatabase { with: Some(DatabasePolicy { name: Some(n), .. }), .. }]) if n == "three"
        ));
        assert_eq!(
            parse("ALTER RETENTION POLICY a ON db").unwrap_err(),
            "found EOF, expected DURATION, REPLICATION, SHARD, DEFAULT at line 1, char 32"
        );
    }

    #[test]
    fn errors_read_as_influxdbs() {
        assert_eq!(
            parse("blah").unwrap_err(),
            "found blah, expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL at line 1, char 1"
        );
        assert_eq!(
            parse("SHOW TAG VALUES FROM cpu").unwrap_err(),
            "found EOF, expected WITH at line 1, char 26"
        );
        assert_eq!(
            parse("CREATE DATABASE 'x'").unwrap_err(),
            "found 'x', expected identifier at line 1, char 17"
        );
        assert!(parse("SHOW \"unterminated").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn selects_as_grafana_and_tsbs_write_them() {
        let q = "SELECT mean(\"value\") AS m, max(v) FROM \"autogen\".\"cpu\" WHERE (\"host\" = 'a' OR host != 'b') \
                 AND time >= 1596240000000ms and time <= now() - 5m GROUP BY time(10s, -2s), host fill(null) \
                 ORDER BY time DESC LIMIT 10 OFFSET 1 SLIMIT 2 SOFFSET 3";
        let s = only_select(q);
        assert_eq!(s.from, "cpu");
        assert_eq!(
            s.fields[0],
            SelectField {
                expr: SelectExpr::Call {
                    func: "mean".into(),
                    field: "value".into(),
                    arg: None
                },
                alias: Some("m".into())
            }
        );
        // time(10s, -2s): the offset modulo the interval, as InfluxDB's.
        assert_eq!(s.group_time, Some((10_000_000_000, 8_000_000_000)));
        assert_eq!(s.group_tags, GroupTags::List(vec!["host".into()]));
        assert_eq!(s.fill, Fill::Null);
        assert!(s.descending);
        assert_eq!(
            (s.limit, s.offset, s.slimit, s.soffset),
            (Some(10), 1, Some(2), 3)
        );
        // One chain of its three ANDs.
        let Some(Expr::And(terms)) = &s.condition else {
            panic!("{:?}", s.condition);
        };
        assert_eq!(terms.len(), 3);
        let Some(Expr::Compare {
            op,
            rhs: Operand::Time(t),
            ..
        }) = terms.last()
        else {
            panic!("{terms:?}");
        };
        assert_eq!(*op, CompareOp::LtEq);
        assert!(*t > 1_700_000_000_000_000_000);
        assert!(parse("SELECT percentile(v, 95) FROM m GROUP BY *").is_ok());
        assert!(parse("SELECT v FROM m WHERE v > -1.5 AND b = true").is_ok());
        assert!(parse("SELECT FROM m").is_err());
        assert!(parse("SELECT v FROM m GROUP BY time(0s)").is_err());
        // An offset of any size is one within the interval: bucket times
        // subtract it from a point's time.
        let s = only_select("SELECT max(v) FROM m GROUP BY time(1m, -9223372036854775807ns)");
        assert_eq!(
            s.group_time,
            Some((60_000_000_000, (-i64::MAX).rem_euclid(60_000_000_000)))
        );
        // `time` in the select list names the time column; a retention
        // policy named in FROM is kept for the answer to check.
        let s = only_select("SELECT time AS t, v FROM db.rp.m");
        assert_eq!(s.time_column, "t");
        assert_eq!(s.fields.len(), 1);
        assert_eq!(
            (
                s.database.as_deref(),
                s.retention_policy.as_deref(),
                s.from.as_str()
            ),
            (Some("db"), Some("rp"), "m")
        );
        let s = only_select("SELECT v, time FROM db..m");
        assert_eq!(s.time_column, "time");
        assert_eq!(
            (s.database.as_deref(), s.retention_policy.as_deref()),
            (Some("db"), None)
        );
        // InfluxDB refuses it when the statement runs, not as a parse error.
        let s = only_select("SELECT time FROM m");
        assert!(s.fields.is_empty());
    }

    #[test]
    fn deep_and_long_conditions_are_bounded_not_recursed() {
        // 3,000 parentheses, and 10,000 unbalanced ones, aborted the
        // server (stack overflow): refused, naming the limit.
        let deep = format!(
            "SELECT v FROM m WHERE {}a = '1'{}",
            "(".repeat(3000),
            ")".repeat(3000)
        );
        let unbalanced = format!("SELECT v FROM m WHERE {}", "(".repeat(10_000));
        for q in [deep, unbalanced] {
            let e = parse(&q).expect_err("too deep");
            assert!(e.contains("more than 100 deep"), "{e}");
        }
        let at_limit = format!(
            "SELECT v FROM m WHERE {}a = '1'{}",
            "(".repeat(MAX_CONDITION_DEPTH),
            ")".repeat(MAX_CONDITION_DEPTH)
        );
        assert!(parse(&at_limit).is_ok());
        // 100,000 ORs are one node of their terms, not a tree as deep.
        let ors = (0..100_000)
            .map(|i| format!("host = 'h{i}'"))
            .collect::<Vec<_>>()
            .join(" OR ");
        let s = only_select(&format!("SELECT v FROM m WHERE {ors}"));
        assert!(matches!(&s.condition, Some(Expr::Or(t)) if t.len() == 100_000));
        // A chain in parentheses inside a chain of the same joins it.
        let s = only_select("SELECT v FROM m WHERE (a = '1' OR b = '2') OR (c = '3' AND d = '4')");
        let Some(Expr::Or(terms)) = &s.condition else {
            panic!("{:?}", s.condition);
        };
        assert_eq!(terms.len(), 3);
        assert!(matches!(&terms[2], Expr::And(t) if t.len() == 2));
    }

    #[test]
    fn select_list_arithmetic_and_calls_of_calls_parse_as_influxql_ranks_them() {
        let field = |q: &str| only_select(q).fields[0].expr.clone();
        let col = |c: &str| Box::new(FieldExpr::Column(c.into()));
        // `*` binds tighter than `+`; `-` on a literal is the literal's.
        assert_eq!(
            field("SELECT a + b * -2 FROM m"),
            SelectExpr::Expr(FieldExpr::Binary {
                op: BinaryOp::Add,
                lhs: col("a"),
                rhs: Box::new(FieldExpr::Binary {
                    op: BinaryOp::Mul,
                    lhs: col("b"),
                    rhs: Box::new(FieldExpr::Integer(-2)),
                }),
            })
        );
        // Left to right among equals; `-x` is `-1 * x`.
        assert_eq!(
            field("SELECT a - b - -c FROM m"),
            SelectExpr::Expr(FieldExpr::Binary {
                op: BinaryOp::Sub,
                lhs: Box::new(FieldExpr::Binary {
                    op: BinaryOp::Sub,
                    lhs: col("a"),
                    rhs: col("b"),
                }),
                rhs: Box::new(FieldExpr::Binary {
                    op: BinaryOp::Mul,
                    lhs: Box::new(FieldExpr::Integer(-1)),
                    rhs: col("c"),
                }),
            })
        );
        assert_eq!(
            field("SELECT non_negative_derivative(mean(\"bytes\"), 1s) FROM m"),
            SelectExpr::Expr(FieldExpr::Call {
                func: "non_negative_derivative".into(),
                args: vec![
                    FieldExpr::Call {
                        func: "mean".into(),
                        args: vec![FieldExpr::Column("bytes".into())],
                    },
                    FieldExpr::Duration(1_000_000_000),
                ],
            })
        );
        // A call of a field is the aggregate select's, as before.
        assert_eq!(
            field("SELECT PERCENTILE(v, 95) FROM m"),
            SelectExpr::Call {
                func: "percentile".into(),
                field: "v".into(),
                arg: Some(95.0),
            }
        );
        assert_eq!(field("SELECT (v) FROM m"), SelectExpr::Column("v".into()));
    }

    /// The function menus' forms: `/re/` where a name is expected (and
    /// `/` as division after an operand), casts taken and dropped,
    /// `count(distinct())`, top's tags, integral's unit, bare `ORDER BY`.
    #[test]
    fn function_menus_regexes_casts_and_bare_order_parse_as_influxql_writes_them() {
        let select = only_select;
        let fields =
            |q: &str| -> Vec<SelectExpr> { select(q).fields.into_iter().map(|f| f.expr).collect() };
        assert_eq!(
            fields("SELECT max(/^usage/), /a/, x / 2 FROM m"),
            vec![
                SelectExpr::CallEach {
                    func: "max".into(),
                    pattern: Some("^usage".into()),
                    arg: None
                },
                SelectExpr::Matching("a".into()),
                SelectExpr::Expr(FieldExpr::Binary {
                    op: BinaryOp::Div,
                    lhs: Box::new(FieldExpr::Column("x".into())),
                    rhs: Box::new(FieldExpr::Integer(2)),
                }),
            ]
        );
        assert_eq!(
            fields("SELECT mean(*), percentile(*, 90) FROM m")[1],
            SelectExpr::CallEach {
                func: "percentile".into(),
                pattern: None,
                arg: Some(90.0)
            }
        );
        assert_eq!(
            fields("SELECT count(distinct(\"v\"::field)), distinct(v) FROM m"),
            vec![
                SelectExpr::Distinct {
                    field: "v".into(),
                    count: true
                },
                SelectExpr::Distinct {
                    field: "v".into(),
                    count: false
                },
            ]
        );
        assert_eq!(
            fields("SELECT bottom(v::float, host::tag, dc, 3) FROM m"),
            vec![SelectExpr::Rank {
                bottom: true,
                field: "v".into(),
                tags: vec!["host".into(), "dc".into()],
                n: 3
            }]
        );
        // Wrong arguments are an expression, which the statement refuses
        // with InfluxDB's words when it runs.
        assert!(matches!(
            fields("SELECT top(v, 2.5) FROM m")[0],
            SelectExpr::Expr(_)
        ));
        assert!(matches!(
            fields("SELECT integral(v, 5) FROM m")[0],
            SelectExpr::Expr(_)
        ));
        assert_eq!(
            fields("SELECT integral(v, 1m) FROM m")[0],
            SelectExpr::Call {
                func: "integral".into(),
                field: "v".into(),
                arg: Some(60e9)
            }
        );
        let s = select(
            "SELECT mean(\"v\"::field) FROM m WHERE \"host\"::tag = 'a' GROUP BY \"host\"::tag ORDER BY asc",
        );
        assert_eq!(s.group_tags, GroupTags::List(vec!["host".into()]));
        assert!(!s.descending);
        assert!(matches!(&s.condition, Some(Expr::Compare { lhs, .. }) if lhs == "host"));
        assert!(select("SELECT v FROM m ORDER BY DESC").descending);
        for (q, error) in [
            (
                "SELECT v FROM m ORDER BY host",
                "only ORDER BY time supported at this time",
            ),
            (
                "SELECT v FROM m ORDER BY time, host",
                "only ORDER BY time supported at this time",
            ),
            (
                "SELECT v::bogus FROM m",
                "found bogus, expected float, integer, unsigned, string, boolean, field, tag at line 1, char 11",
            ),
            (
                "SELECT v FROM (SELECT v FROM m), n",
                "a subquery beside other sources is not answered by halite yet: read one subquery",
            ),
        ] {
            assert_eq!(parse(q).unwrap_err(), error, "{q}");
        }
        // A subquery, with the outer clauses after it; nested past the
        // limit, an error naming it rather than a recursion.
        let s = select(
            "SELECT sum(r) FROM (SELECT mean(v) AS r FROM m GROUP BY time(1m), host) WHERE time > 0 GROUP BY time(1m)",
        );
        let inner = s.subquery.as_deref().expect("a subquery");
        assert_eq!(inner.from, "m");
        assert_eq!(inner.group_tags, GroupTags::List(vec!["host".into()]));
        assert!(s.condition.is_some() && inner.condition.is_none());
        let nested = |n: usize| {
            format!(
                "SELECT v FROM {}m{}",
                "(SELECT v FROM ".repeat(n),
                ")".repeat(n)
            )
        };
        assert!(parse(&nested(MAX_SUBQUERY_DEPTH)).is_ok());
        let deep = parse(&nested(MAX_SUBQUERY_DEPTH + 1)).unwrap_err();
        assert!(
            deep.starts_with("subqueries nest more than 10 deep"),
            "{deep}"
        );
    }

    #[test]
    fn deep_and_long_fields_are_bounded_not_recursed() {
        // Each would recurse once per level where the statement is
        // checked, answered and dropped: refused, naming the limit.
        let parens = format!("SELECT {}v{} FROM m", "(".repeat(5000), ")".repeat(5000));
        let calls = format!(
            "SELECT {}v{} FROM m",
            "derivative(".repeat(5000),
            ")".repeat(5000)
        );
        let sums = format!("SELECT {} FROM m", vec!["v"; 100_000].join(" + "));
        let negations = format!("SELECT {}v FROM m", "-".repeat(100_000));
        for q in [parens, calls] {
            let e = parse(&q).expect_err("too deep");
            assert!(e.contains("more than 100 deep"), "{e}");
        }
        for q in [sums, negations] {
            let e = parse(&q).expect_err("too long");
            assert!(e.contains("more than 1000 operators and calls"), "{e}");
        }
        let at_limit = format!(
            "SELECT {} FROM m",
            vec!["v"; MAX_FIELD_NODES + 1].join(" + ")
        );
        assert!(parse(&at_limit).is_ok());
    }

    #[test]
    fn times_read_and_write_as_influxdb_does() {
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000_500_000_000)
        );
        assert_eq!(parse_rfc3339("1970-01-02"), Some(86_400_000_000_000));
        assert_eq!(parse_rfc3339("2023-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20"), None);
        assert_eq!(
            format_rfc3339(1_700_000_000_000_000_000),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            format_rfc3339(1_700_000_000_120_000_000),
            "2023-11-14T22:13:20.12Z"
        );
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_duration("1596240000000ms"),
            Some(1_596_240_000_000_000_000)
        );
        assert_eq!(parse_duration("2w"), Some(1_209_600_000_000_000));
        assert_eq!(parse_duration("5x"), None);
    }
}
