//! InfluxQL's select-list expressions beyond a field or a call of one:
//! arithmetic (`100 - mean(usage_idle)`, `"a" * 8`) and the
//! transformations of a series (`derivative`, `non_negative_derivative`,
//! `difference`, `non_negative_difference`, `moving_average`,
//! `cumulative_sum`, `elapsed`) and the math functions (`abs`, `round`,
//! `pow`, `log`, …, of each row's value), checked and answered as
//! InfluxDB 1.6 compiles and answers them.
//!
//! A statement holding them runs in two steps. First the plain fields and
//! calls they are made of (the leaves) are selected as any statement is,
//! with no `LIMIT` or `OFFSET`, in ascending time and, for a
//! transformation over `GROUP BY time`, reaching back as many buckets
//! before the range as it needs (InfluxDB's "extra intervals", so the
//! range's first bucket has a derivative too). Then each output column is
//! worked out over each series' rows, the buckets before the range are cut
//! off, and `ORDER BY`, `OFFSET` and `LIMIT` apply to what is left.

use std::collections::BTreeMap;

use super::influx_reduce::{AnswerType, Cell, Func, SeriesOut};
use super::influxql::{
    BinaryOp, FieldExpr, Fill, MATH, Select, SelectExpr, SelectField, TRANSFORMS, format_duration,
};
use crate::series::FieldType;
use crate::value::Value;

/// How a statement of expressions is answered: the leaves' statements,
/// and how each output column is made of its leaves.
pub struct Plan {
    /// The leaves: a field or a call each, in the order the expressions
    /// name them (one per occurrence: `last(x), last(x) * 2` holds two
    /// calls, which InfluxDB answers at the bucket's time, not the
    /// selected point's).
    leaves: Vec<SelectExpr>,
    /// Whether leaf `i` is under a transformation that reaches back.
    reaching: Vec<bool>,
    /// The statement with no `LIMIT`, `OFFSET` or `ORDER BY`, and no
    /// fields: each [`LeafQuery`] gives it its own.
    base: Select,
    /// `GROUP BY time` buckets the transformations reach back beyond the
    /// range: before it, or after it under `ORDER BY time DESC`.
    extra_buckets: i64,
    outputs: Vec<Node>,
    names: Vec<String>,
    /// The outputs' kinds, once the measurement's types are known.
    kinds: std::sync::OnceLock<Vec<Kind>>,
    descending: bool,
    fill: Fill,
    limit: Option<usize>,
    offset: usize,
}

/// One statement of leaves to select, and where its answer's columns go.
pub struct LeafQuery {
    pub select: Select,
    /// The leaves (by index) its answer's columns hold, in order.
    leaves: Vec<usize>,
    /// Nanoseconds its range reaches beyond the statement's: before the
    /// lower bound, and after the upper.
    pub reach: (i64, i64),
}

/// Where a statement's answer is cut when its leaves reached beyond the
/// range: the first and last buckets of the range as written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Span {
    pub first: Option<i64>,
    pub last: Option<i64>,
}

/// An output column's expression over the leaves.
#[derive(Debug, Clone)]
enum Node {
    /// The leaves' statement's field `n` (its answer's column `n + 1`).
    Leaf(usize),
    Literal(Value),
    Binary {
        op: BinaryOp,
        lhs: Box<Node>,
        rhs: Box<Node>,
    },
    Transform {
        kind: Transform,
        input: Box<Node>,
    },
    /// A math function of each row's values of its arguments.
    Math {
        func: Math,
        args: Vec<Node>,
    },
}

impl Node {
    /// Whether a transformation is part of the node.
    fn transforms(&self) -> bool {
        match self {
            Node::Transform { .. } => true,
            Node::Binary { lhs, rhs, .. } => lhs.transforms() || rhs.transforms(),
            Node::Math { args, .. } => args.iter().any(Node::transforms),
            Node::Leaf(_) | Node::Literal(_) => false,
        }
    }
}

/// A math function (InfluxDB 1.6's `query/math.go`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Math {
    Abs,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Atan2,
    Exp,
    Log,
    Ln,
    Log2,
    Log10,
    Sqrt,
    Pow,
    Floor,
    Ceil,
    Round,
}

impl Math {
    fn of(name: &str) -> Option<Math> {
        Some(match name {
            "abs" => Math::Abs,
            "sin" => Math::Sin,
            "cos" => Math::Cos,
            "tan" => Math::Tan,
            "asin" => Math::Asin,
            "acos" => Math::Acos,
            "atan" => Math::Atan,
            "atan2" => Math::Atan2,
            "exp" => Math::Exp,
            "log" => Math::Log,
            "ln" => Math::Ln,
            "log2" => Math::Log2,
            "log10" => Math::Log10,
            "sqrt" => Math::Sqrt,
            "pow" => Math::Pow,
            "floor" => Math::Floor,
            "ceil" => Math::Ceil,
            "round" => Math::Round,
            _ => return None,
        })
    }

    fn arity(self) -> usize {
        match self {
            Math::Atan2 | Math::Log | Math::Pow => 2,
            _ => 1,
        }
    }

    /// Whether an integer argument answers an integer (the value itself,
    /// or its absolute value), as InfluxDB's.
    fn keeps_integers(self) -> bool {
        matches!(self, Math::Abs | Math::Floor | Math::Ceil | Math::Round)
    }

    /// The function of the row's values; `None` (null) for a NaN or an
    /// infinity, which InfluxDB cannot write in JSON either.
    fn apply(self, args: &[Num]) -> Option<Value> {
        if self.keeps_integers()
            && let [Num::Int(i)] = args
        {
            return Some(Value::Int(if self == Math::Abs {
                i.checked_abs()?
            } else {
                *i
            }));
        }
        let x = as_f64(*args.first()?);
        let y = args.get(1).map(|a| as_f64(*a));
        let v = match (self, y) {
            (Math::Abs, _) => x.abs(),
            (Math::Sin, _) => x.sin(),
            (Math::Cos, _) => x.cos(),
            (Math::Tan, _) => x.tan(),
            (Math::Asin, _) => x.asin(),
            (Math::Acos, _) => x.acos(),
            (Math::Atan, _) => x.atan(),
            (Math::Atan2, Some(y)) => x.atan2(y),
            (Math::Exp, _) => x.exp(),
            (Math::Log, Some(base)) => x.ln() / base.ln(),
            (Math::Ln, _) => x.ln(),
            (Math::Log2, _) => x.log2(),
            (Math::Log10, _) => x.log10(),
            (Math::Sqrt, _) => x.sqrt(),
            (Math::Pow, Some(y)) => x.powf(y),
            (Math::Floor, _) => x.floor(),
            (Math::Ceil, _) => x.ceil(),
            // Go's math.Round: halves away from zero, as Rust's.
            (Math::Round, _) => x.round(),
            (Math::Atan2 | Math::Log | Math::Pow, None) => return None,
        };
        v.is_finite().then_some(Value::Float(v))
    }
}

#[derive(Debug, Clone, Copy)]
enum Transform {
    /// The change per `unit` nanoseconds.
    Derivative {
        unit: i64,
        non_negative: bool,
    },
    Difference {
        non_negative: bool,
    },
    /// The mean of the last `n` values.
    MovingAverage(usize),
    CumulativeSum,
    /// The time since the previous point, in `unit` nanoseconds.
    Elapsed {
        unit: i64,
    },
}

/// What a leaf or an expression is, for InfluxDB's type errors.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Integer,
    Float,
    Boolean,
    String,
    Tag,
    /// A name the measurement has neither as a field nor as a tag: it
    /// answers nulls, and no error.
    Unknown,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Integer => "integer",
            Kind::Float => "float",
            Kind::Boolean => "boolean",
            Kind::String => "string",
            Kind::Tag => "tag",
            Kind::Unknown => "unknown",
        }
    }

    fn of_field(ty: FieldType) -> Kind {
        match ty {
            FieldType::Float => Kind::Float,
            FieldType::Integer | FieldType::Unsigned => Kind::Integer,
            FieldType::Boolean => Kind::Boolean,
            FieldType::String => Kind::String,
        }
    }

    fn of_answer(ty: AnswerType) -> Kind {
        match ty {
            AnswerType::Integer => Kind::Integer,
            AnswerType::Float => Kind::Float,
            AnswerType::Boolean => Kind::Boolean,
            AnswerType::String => Kind::String,
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Kind::Integer | Kind::Float | Kind::Unknown)
    }
}

/// Whether the select list holds an expression [`Plan`] answers.
pub fn needs_plan(s: &Select) -> bool {
    s.fields
        .iter()
        .any(|f| matches!(f.expr, SelectExpr::Expr(_)))
}

impl Plan {
    /// Checks the statement's expressions as InfluxDB 1.6 compiles them
    /// (before it looks at any data) and makes the leaves' statement.
    pub fn new(s: &Select) -> Result<Plan, String> {
        let mut leaves: Vec<SelectExpr> = Vec::new();
        let mut reaching: Vec<bool> = Vec::new();
        let mut outputs = Vec::new();
        let mut names = Vec::new();
        let mut aliases = Vec::new();
        let mut extra_buckets = 0;
        let mut any_aggregate = false;
        let mut any_raw = false;
        let every = s.group_time.map(|(every, _)| every);
        for f in &s.fields {
            let expr = match &f.expr {
                SelectExpr::Wildcard => {
                    return Err(
                        "* beside arithmetic or a transformation is not answered by halite \
                         yet: name the fields"
                            .into(),
                    );
                }
                SelectExpr::Column(c) => FieldExpr::Column(c.clone()),
                SelectExpr::Call { func, field, arg } => {
                    let mut args = vec![FieldExpr::Column(field.clone())];
                    args.extend(arg.map(|a| {
                        if func == "integral" {
                            FieldExpr::Duration(a as i64)
                        } else {
                            number_literal(a)
                        }
                    }));
                    FieldExpr::Call {
                        func: func.clone(),
                        args,
                    }
                }
                SelectExpr::Distinct { field, count: true } => FieldExpr::Call {
                    func: "count".into(),
                    args: vec![FieldExpr::Call {
                        func: "distinct".into(),
                        args: vec![FieldExpr::Column(field.clone())],
                    }],
                },
                SelectExpr::Matching(_)
                | SelectExpr::CallEach { .. }
                | SelectExpr::Distinct { .. }
                | SelectExpr::Rank { .. } => {
                    return Err(format!(
                        "{} beside arithmetic or a transformation is not answered by halite \
                         yet: write it in a statement of its own",
                        select_expr_name(&f.expr)
                    ));
                }
                SelectExpr::Expr(e) => e.clone(),
            };
            let mut shape = Shape::default();
            let mut leaves_at = Leaves {
                leaves: &mut leaves,
                reaching: &mut reaching,
                under_reach: false,
            };
            let node = compile(&expr, every, &mut leaves_at, &mut shape, &mut extra_buckets)?;
            if !shape.variable {
                return Err("field must contain at least one variable".into());
            }
            any_aggregate |= shape.aggregate;
            any_raw |= shape.raw;
            outputs.push(node);
            names.push(field_name(&expr));
            aliases.push(f.alias.clone());
        }
        if any_aggregate && any_raw {
            return Err("mixing aggregate and non-aggregate queries is not supported".into());
        }
        if !any_aggregate && every.is_some() {
            return Err("GROUP BY requires at least one aggregate function".into());
        }
        // Arithmetic alone is worked out row by row, every column with a
        // point at every row of its leaves: their statement takes the
        // LIMIT (and reads only what it answers). A transformation's
        // column has points at some rows only, and is limited after it.
        let row_wise = !outputs.iter().any(Node::transforms);
        let (limit, offset) = (s.limit.filter(|n| *n > 0), s.offset);
        let base = Select {
            fields: Vec::new(),
            limit: if row_wise { limit } else { None },
            offset: if row_wise { offset } else { 0 },
            ..s.clone()
        };
        Ok(Plan {
            leaves,
            reaching,
            base,
            extra_buckets,
            outputs,
            names: column_names(names, aliases),
            kinds: std::sync::OnceLock::new(),
            descending: s.descending,
            fill: s.fill.clone(),
            limit: if row_wise { None } else { limit },
            offset: if row_wise { 0 } else { offset },
        })
    }

    /// The statements of leaves to select: one, or two where some leaves
    /// are under a transformation that reaches beyond the range and others
    /// are not (`mean(x), derivative(mean(x))`: the plain `mean` of the
    /// range's first bucket holds only the range's points, as InfluxDB's
    /// own iterator for it does).
    pub fn queries(&self) -> Vec<LeafQuery> {
        let reach = match self.base.group_time {
            Some((every, _)) if self.extra_buckets > 0 => {
                let by = every.saturating_mul(self.extra_buckets);
                if self.descending { (0, by) } else { (by, 0) }
            }
            _ => (0, 0),
        };
        let query = |wanted: Option<bool>, reach: (i64, i64)| {
            let leaves: Vec<usize> = (0..self.leaves.len())
                .filter(|&i| wanted.is_none_or(|w| self.reaching[i] == w))
                .collect();
            LeafQuery {
                select: Select {
                    fields: leaves
                        .iter()
                        .map(|&i| SelectField {
                            expr: self.leaves[i].clone(),
                            alias: None,
                        })
                        .collect(),
                    ..self.base.clone()
                },
                leaves,
                reach,
            }
        };
        if reach == (0, 0) || self.reaching.iter().all(|r| *r) {
            return vec![query(None, reach)];
        }
        vec![query(Some(true), reach), query(Some(false), (0, 0))]
    }

    /// InfluxDB's type errors, once the measurement's fields and tags are
    /// known: arithmetic over a string, a boolean or a tag.
    pub fn check_types(
        &self,
        fields: &BTreeMap<String, FieldType>,
        is_tag: &dyn Fn(&str) -> bool,
    ) -> Result<(), String> {
        let leaf_kinds: Vec<Kind> = self
            .leaves
            .iter()
            .map(|l| leaf_kind(l, fields, is_tag))
            .collect();
        let field_kinds: Vec<Kind> = self
            .leaves
            .iter()
            .map(|l| match l {
                SelectExpr::Call { field, .. }
                | SelectExpr::Distinct { field, .. }
                | SelectExpr::Column(field) => fields
                    .get(field)
                    .map_or(Kind::Unknown, |ty| Kind::of_field(*ty)),
                _ => Kind::Unknown,
            })
            .collect();
        let typed = Typed {
            leaves: &self.leaves,
            kinds: &leaf_kinds,
            fields: &field_kinds,
        };
        let kinds = self
            .outputs
            .iter()
            .map(|node| typed.kind_of(node))
            .collect::<Result<Vec<Kind>, String>>()?;
        let _ = self.kinds.set(kinds);
        Ok(())
    }

    /// The statement's answer from its leaves' answers (in ascending time,
    /// every row), in the order of [`Plan::queries`]: each series' output
    /// columns, the rows outside `span` cut off (where the leaves reached
    /// beyond it), then ordered; `OFFSET` and `LIMIT` count each column's
    /// points apart, as InfluxDB limits each call's iterator before its
    /// rows are joined.
    pub fn answer(&self, answers: Vec<(LeafQuery, Vec<SeriesOut>)>, span: Span) -> Vec<SeriesOut> {
        let kinds = self.kinds.get();
        let mut out = Vec::new();
        for series in self.joined(answers) {
            let rows = series.values;
            let mut columns: Vec<Vec<Slot>> = self.outputs.iter().map(|n| eval(n, &rows)).collect();
            let times: Vec<i64> = rows.iter().map(|r| row_time(r)).collect();
            let outside = |t: i64| {
                span.first.is_some_and(|first| t < first) || span.last.is_some_and(|last| t > last)
            };
            for column in &mut columns {
                let mut points = 0usize;
                for (slot, &t) in column.iter_mut().zip(&times) {
                    if matches!(slot, Slot::Absent) {
                        continue;
                    }
                    if outside(t) {
                        *slot = Slot::Absent;
                        continue;
                    }
                    let kept = points >= self.offset
                        && self.limit.is_none_or(|n| points - self.offset < n);
                    points += 1;
                    if !kept {
                        *slot = Slot::Absent;
                    }
                }
            }
            let mut previous: Vec<Option<Value>> = vec![None; columns.len()];
            let mut answered: Vec<Vec<Cell>> = Vec::new();
            for (i, &time) in times.iter().enumerate() {
                if columns.iter().all(|c| matches!(c[i], Slot::Absent)) {
                    continue;
                }
                let mut cells = vec![Cell::Time(time)];
                for (c, column) in columns.iter().enumerate() {
                    cells.push(match &column[i] {
                        // NaN (a float's `% 0`) is null, as InfluxDB writes it.
                        Slot::Value(Value::Float(f)) if f.is_nan() => Cell::Null,
                        Slot::Value(v) => {
                            previous[c] = Some(v.clone());
                            Cell::Value(v.clone())
                        }
                        Slot::Null => Cell::Null,
                        // A column without a point at the row: the fill's
                        // value, as InfluxDB's cursor defaults it.
                        Slot::Absent => match &self.fill {
                            Fill::Value(n) => kinds
                                .and_then(|k| fill_value(*n, k[c]))
                                .map_or(Cell::Null, Cell::Value),
                            Fill::Previous => previous[c].clone().map_or(Cell::Null, Cell::Value),
                            _ => Cell::Null,
                        },
                    });
                }
                answered.push(cells);
            }
            if answered.is_empty() {
                continue;
            }
            let mut columns = vec![series.columns.first().cloned().unwrap_or_default()];
            columns.extend(self.names.iter().cloned());
            out.push(SeriesOut {
                name: series.name,
                tags: series.tags,
                columns,
                values: answered,
            });
        }
        out
    }

    /// The leaves' answers as one, a column per leaf, series and rows in
    /// the statement's order: as they are when there is one, else joined
    /// by series and time (a row of one that the other lacks has nulls in
    /// the other's columns).
    fn joined(&self, mut answers: Vec<(LeafQuery, Vec<SeriesOut>)>) -> Vec<SeriesOut> {
        if answers.len() == 1 {
            return answers.pop().map(|(_, a)| a).unwrap_or_default();
        }
        type Key = (String, Option<BTreeMap<String, String>>);
        type Rows = (Vec<String>, BTreeMap<i64, Vec<Cell>>);
        let mut series: BTreeMap<Key, Rows> = BTreeMap::new();
        for (query, answer) in answers {
            for s in answer {
                let entry = series
                    .entry((s.name, s.tags))
                    .or_insert_with(|| (s.columns.clone(), BTreeMap::new()));
                for row in s.values {
                    let cells = entry
                        .1
                        .entry(row_time(&row))
                        .or_insert_with(|| vec![Cell::Null; self.leaves.len()]);
                    for (j, cell) in row.into_iter().skip(1).enumerate() {
                        cells[query.leaves[j]] = cell;
                    }
                }
            }
        }
        let mut joined: Vec<SeriesOut> = series
            .into_iter()
            .map(|((name, tags), (columns, rows))| {
                let mut values: Vec<Vec<Cell>> = rows
                    .into_iter()
                    .map(|(t, cells)| {
                        let mut row = vec![Cell::Time(t)];
                        row.extend(cells);
                        row
                    })
                    .collect();
                if self.descending {
                    values.reverse();
                }
                SeriesOut {
                    name,
                    tags,
                    columns,
                    values,
                }
            })
            .collect();
        if self.descending {
            joined.reverse();
        }
        joined
    }
}

fn row_time(row: &[Cell]) -> i64 {
    match row.first() {
        Some(Cell::Time(t)) => *t,
        _ => 0,
    }
}

/// `fill(n)`'s value in a column of `kind`, cast as InfluxDB casts it.
fn fill_value(n: f64, kind: Kind) -> Option<Value> {
    match kind {
        Kind::Integer => Some(Value::Int(n as i64)),
        Kind::Float | Kind::Unknown => Some(Value::Float(n)),
        _ => None,
    }
}

/// A statement's column names as InfluxDB gives them
/// (`SelectStatement.ColumnNames`): aliases as written, then each
/// unaliased name in order, with `_1`, `_2`, … after a name taken.
fn column_names(names: Vec<String>, aliases: Vec<Option<String>>) -> Vec<String> {
    let mut taken: BTreeMap<String, usize> =
        aliases.iter().flatten().map(|a| (a.clone(), 1)).collect();
    names
        .into_iter()
        .zip(aliases)
        .map(|(name, alias)| {
            if let Some(alias) = alias {
                return alias;
            }
            let mut name = name;
            if let Some(&count) = taken.get(&name) {
                let mut count = count;
                loop {
                    let resolved = format!("{name}_{count}");
                    if !taken.contains_key(&resolved) {
                        taken.insert(name.clone(), count + 1);
                        name = resolved;
                        break;
                    }
                    count += 1;
                }
            }
            *taken.entry(name.clone()).or_insert(0) += 1;
            name
        })
        .collect()
}

fn number_literal(v: f64) -> FieldExpr {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        FieldExpr::Integer(v as i64)
    } else {
        FieldExpr::Number(v)
    }
}

/// What compiling one output field found in it.
#[derive(Default)]
struct Shape {
    /// It names a field, a tag or a call (not literals only).
    variable: bool,
    /// It calls a function (an aggregate or a transformation).
    aggregate: bool,
    /// It names a field outside any call.
    raw: bool,
}

/// Where compiling puts the leaves it finds.
struct Leaves<'a> {
    leaves: &'a mut Vec<SelectExpr>,
    reaching: &'a mut Vec<bool>,
    /// Compiling under a transformation that reaches beyond the range.
    under_reach: bool,
}

impl Leaves<'_> {
    fn push(&mut self, leaf: SelectExpr) -> Node {
        // A field's values are the same wherever it is named: one column
        // of it (a call is one per occurrence: two calls answer at the
        // bucket's time where one selector answers at its point's).
        if let SelectExpr::Column(_) = leaf
            && let Some(i) = (0..self.leaves.len())
                .find(|&i| self.leaves[i] == leaf && self.reaching[i] == self.under_reach)
        {
            return Node::Leaf(i);
        }
        self.leaves.push(leaf);
        self.reaching.push(self.under_reach);
        Node::Leaf(self.leaves.len() - 1)
    }
}

fn compile(
    e: &FieldExpr,
    every: Option<i64>,
    leaves: &mut Leaves<'_>,
    shape: &mut Shape,
    extra_buckets: &mut i64,
) -> Result<Node, String> {
    let grouped = every.is_some();
    Ok(match e {
        FieldExpr::Column(c) => {
            shape.variable = true;
            shape.raw = true;
            leaves.push(SelectExpr::Column(c.clone()))
        }
        FieldExpr::Wildcard => {
            return Err("unable to use wildcard in a binary expression".into());
        }
        FieldExpr::Regex(_) => {
            return Err("unable to use regex in a binary expression".into());
        }
        FieldExpr::Integer(i) => Node::Literal(Value::Int(*i)),
        FieldExpr::Number(v) => Node::Literal(Value::Float(*v)),
        FieldExpr::Str(s) => Node::Literal(Value::Str(s.clone())),
        FieldExpr::Bool(b) => Node::Literal(Value::Bool(*b)),
        FieldExpr::Duration(d) => Node::Literal(Value::Int(*d)),
        FieldExpr::Binary { op, lhs, rhs } => {
            let lhs = compile(lhs, every, leaves, shape, extra_buckets)?;
            let rhs = compile(rhs, every, leaves, shape, extra_buckets)?;
            match (lhs, rhs) {
                // Literals are folded as InfluxDB reduces them (`x * (2 +
                // 3)` is `x * 5`).
                (Node::Literal(a), Node::Literal(b)) => match (&a, &b) {
                    (Value::Str(x), Value::Str(y)) if *op == BinaryOp::Add => {
                        Node::Literal(Value::Str(format!("{x}{y}")))
                    }
                    _ => match binary(*op, &a, &b) {
                        Some(v) => Node::Literal(v),
                        // Go's math.Mod by zero: NaN, which answers null.
                        None if *op == BinaryOp::Mod && number(&a).is_some() => {
                            Node::Literal(Value::Float(f64::NAN))
                        }
                        None => {
                            return Err("cannot perform a binary expression on two literals".into());
                        }
                    },
                },
                (lhs, rhs) => Node::Binary {
                    op: *op,
                    lhs: Box::new(lhs),
                    rhs: Box::new(rhs),
                },
            }
        }
        FieldExpr::Call { func, args } if TRANSFORMS.contains(&func.as_str()) => {
            shape.variable = true;
            shape.aggregate = true;
            let kind = transform_of(func, args, every)?;
            let input = match &args[0] {
                FieldExpr::Call { .. } => {
                    if !grouped {
                        return Err(format!("{func} aggregate requires a GROUP BY interval"));
                    }
                    // As InfluxDB 1.6 reaches back: one bucket (whatever a
                    // moving average's window), none for a cumulative sum.
                    let reaches = !matches!(kind, Transform::CumulativeSum);
                    if reaches {
                        *extra_buckets = 1;
                    }
                    let outer = leaves.under_reach;
                    leaves.under_reach = reaches;
                    let mut inner = Shape::default();
                    let node = compile(&args[0], every, leaves, &mut inner, extra_buckets);
                    leaves.under_reach = outer;
                    let node = node?;
                    if let Node::Transform { .. } = node {
                        return Err(format!(
                            "{func}({}) is not answered by halite yet: a transformation \
                             of a transformation",
                            call_name(&args[0])
                        ));
                    }
                    node
                }
                FieldExpr::Column(c) => {
                    if grouped {
                        return Err(format!(
                            "aggregate function required inside the call to {func}"
                        ));
                    }
                    leaves.push(SelectExpr::Column(c.clone()))
                }
                _ if grouped => {
                    return Err(format!(
                        "aggregate function required inside the call to {func}"
                    ));
                }
                FieldExpr::Wildcard => {
                    return Err(format!(
                        "{func}(*) is not answered by halite yet: name a field"
                    ));
                }
                _ => return Err(format!("expected field argument in {func}()")),
            };
            Node::Transform {
                kind,
                input: Box::new(input),
            }
        }
        FieldExpr::Call { func, args } if MATH.contains(&func.as_str()) => {
            let math = Math::of(func).expect("one of MATH");
            if args.len() != math.arity() {
                return Err(format!(
                    "invalid number of arguments for {func}, expected {}, got {}",
                    math.arity(),
                    args.len()
                ));
            }
            let mut nodes = Vec::with_capacity(args.len());
            for a in args {
                if matches!(a, FieldExpr::Wildcard | FieldExpr::Regex(_)) {
                    return Err(format!(
                        "{func}() of * or a pattern is not answered by halite yet: name the fields"
                    ));
                }
                nodes.push(compile(a, every, leaves, shape, extra_buckets)?);
            }
            Node::Math {
                func: math,
                args: nodes,
            }
        }
        FieldExpr::Call { func, args } if SELECTORS_OF_ROWS.contains(&func.as_str()) => {
            return Err(rows_call_refusal(func, args));
        }
        FieldExpr::Call { func, args }
            if func == "count"
                && matches!(args.first(), Some(FieldExpr::Call { func, .. }) if func == "distinct") =>
        {
            let FieldExpr::Call { args: inner, .. } = &args[0] else {
                unreachable!("matched a call");
            };
            if args.len() != 1 {
                return Err(format!(
                    "invalid number of arguments for count, expected 1, got {}",
                    args.len()
                ));
            }
            let [FieldExpr::Column(field)] = inner.as_slice() else {
                return Err(rows_call_refusal("distinct", inner));
            };
            shape.variable = true;
            shape.aggregate = true;
            leaves.push(SelectExpr::Distinct {
                field: field.clone(),
                count: true,
            })
        }
        FieldExpr::Call { func, args } if func == "integral" => {
            if args.len() > 2 || args.is_empty() {
                return Err(format!(
                    "invalid number of arguments for integral, expected at least 1 but no more \
                     than 2, got {}",
                    args.len()
                ));
            }
            match args.get(1) {
                Some(FieldExpr::Duration(d)) if *d <= 0 => {
                    return Err(format!(
                        "duration argument must be positive, got {}",
                        format_duration(*d)
                    ));
                }
                Some(FieldExpr::Duration(_)) | None => {}
                Some(_) => return Err("second argument must be a duration".into()),
            }
            return Err(match &args[0] {
                FieldExpr::Column(_) | FieldExpr::Wildcard | FieldExpr::Regex(_) => {
                    "integral() beside arithmetic or a transformation is not answered by halite \
                     yet: write it in a statement of its own"
                        .into()
                }
                _ => "expected field argument in integral()".into(),
            });
        }
        FieldExpr::Call { func, args } => {
            shape.variable = true;
            shape.aggregate = true;
            // The function must be one halite answers (else InfluxDB's
            // "undefined function"); its count of arguments is checked
            // next, so `percentile` is given a stand-in for a missing one
            // rather than answer its own message first.
            Func::parse(
                func,
                match args.get(1) {
                    Some(FieldExpr::Integer(i)) => Some(*i as f64),
                    Some(FieldExpr::Number(v)) => Some(*v),
                    _ => Some(0.0),
                },
            )?;
            let want = if func == "percentile" { 2 } else { 1 };
            if args.len() != want {
                return Err(format!(
                    "invalid number of arguments for {func}, expected {want}, got {}",
                    args.len()
                ));
            }
            let field = match &args[0] {
                FieldExpr::Column(c) => c.clone(),
                FieldExpr::Wildcard => {
                    return Err(format!("unsupported expression with wildcard: {func}()"));
                }
                _ => return Err(format!("expected field argument in {func}()")),
            };
            let arg = match args.get(1) {
                None => None,
                Some(FieldExpr::Integer(i)) => Some(*i as f64),
                Some(FieldExpr::Number(v)) => Some(*v),
                Some(other) => {
                    return Err(format!(
                        "expected float argument in {func}(), got {}",
                        go_type(other)
                    ));
                }
            };
            leaves.push(SelectExpr::Call {
                func: func.clone(),
                field,
                arg,
            })
        }
    })
}

/// The functions that answer several rows of a bucket (or its chosen
/// points): answered in a statement of their own, not inside arithmetic.
const SELECTORS_OF_ROWS: [&str; 4] = ["top", "bottom", "distinct", "sample"];

/// InfluxDB's error for a call of top, bottom, distinct or sample whose
/// arguments are wrong (compile.go), or halite's refusal of a right one
/// inside arithmetic or a transformation.
fn rows_call_refusal(func: &str, args: &[FieldExpr]) -> String {
    let inside = || {
        format!(
            "{func}() beside arithmetic or a transformation is not answered by halite yet: \
             write it in a statement of its own"
        )
    };
    match func {
        "distinct" => match args {
            [FieldExpr::Column(_)] => inside(),
            [_] => "expected field argument in distinct()".into(),
            [] => "distinct function requires at least one argument".into(),
            _ => "distinct function can only have one argument".into(),
        },
        "sample" => match args {
            [_, FieldExpr::Integer(n)] if *n < 1 => {
                format!("sample window must be greater than 1, got {n}")
            }
            [
                FieldExpr::Column(_) | FieldExpr::Wildcard | FieldExpr::Regex(_),
                FieldExpr::Integer(_),
            ] => inside(),
            [_, FieldExpr::Integer(_)] => "expected field argument in sample()".into(),
            [_, _] => "expected integer argument in sample()".into(),
            _ => format!(
                "invalid number of arguments for sample, expected 2, got {}",
                args.len()
            ),
        },
        _ => {
            // In InfluxDB's order: the count, the limit, the field, the tags.
            let [first, tags @ .., last] = args else {
                return format!(
                    "invalid number of arguments for {func}, expected at least 2, got {}",
                    args.len()
                );
            };
            let n = match last {
                FieldExpr::Integer(n) => *n,
                other => {
                    return format!(
                        "expected integer as last argument in {func}(), found {}",
                        describe_literal(other)
                    );
                }
            };
            if n < 1 {
                return format!("limit ({n}) in {func} function must be at least 1");
            }
            if !matches!(first, FieldExpr::Column(_)) {
                return format!(
                    "expected first argument to be a field in {func}(), found {}",
                    describe_literal(first)
                );
            }
            if let Some(t) = tags.iter().find(|t| !matches!(t, FieldExpr::Column(_))) {
                return format!(
                    "only fields or tags are allowed in {func}(), found {}",
                    describe_literal(t)
                );
            }
            inside()
        }
    }
}

/// An argument as InfluxDB's errors print it.
fn describe_literal(e: &FieldExpr) -> String {
    match e {
        FieldExpr::Column(c) => c.clone(),
        FieldExpr::Wildcard => "*".into(),
        FieldExpr::Regex(re) => format!("/{re}/"),
        FieldExpr::Integer(i) => i.to_string(),
        FieldExpr::Number(v) => format!("{v:.3}"),
        FieldExpr::Duration(d) => format_duration(*d),
        FieldExpr::Str(s) => format!("'{s}'"),
        FieldExpr::Bool(b) => b.to_string(),
        FieldExpr::Call { func, args } => format!(
            "{func}({})",
            args.iter()
                .map(describe_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        FieldExpr::Binary { op, lhs, rhs } => format!(
            "{} {} {}",
            describe_literal(lhs),
            op.symbol(),
            describe_literal(rhs)
        ),
    }
}

/// A select-list expression as its refusals name it.
fn select_expr_name(e: &SelectExpr) -> String {
    match e {
        SelectExpr::Matching(re) => format!("/{re}/"),
        SelectExpr::CallEach { func, .. } => format!("{func}() of several fields"),
        SelectExpr::Distinct { count: true, .. } => "count(distinct())".into(),
        SelectExpr::Distinct { .. } => "distinct()".into(),
        SelectExpr::Rank { bottom: true, .. } => "bottom()".into(),
        SelectExpr::Rank { .. } => "top()".into(),
        _ => "the expression".into(),
    }
}

/// InfluxDB's check of a transformation's arguments (compile.go).
fn transform_of(func: &str, args: &[FieldExpr], every: Option<i64>) -> Result<Transform, String> {
    let between = |least: usize, most: usize| -> Result<(), String> {
        if args.len() < least || args.len() > most {
            return Err(if least == most {
                format!(
                    "invalid number of arguments for {func}, expected {least}, got {}",
                    args.len()
                )
            } else {
                format!(
                    "invalid number of arguments for {func}, expected at least {least} but no \
                     more than {most}, got {}",
                    args.len()
                )
            });
        }
        Ok(())
    };
    let duration = |default: i64| -> Result<i64, String> {
        match args.get(1) {
            None => Ok(default),
            Some(FieldExpr::Duration(d)) if *d > 0 => Ok(*d),
            Some(FieldExpr::Duration(d)) => Err(format!(
                "duration argument must be positive, got {}",
                format_duration(*d)
            )),
            Some(other) => Err(format!(
                "second argument to {func} must be a duration, got {}",
                go_type(other)
            )),
        }
    };
    Ok(match func {
        "derivative" | "non_negative_derivative" => {
            between(1, 2)?;
            Transform::Derivative {
                // Per the GROUP BY interval by default, or per second.
                unit: duration(every.unwrap_or(1_000_000_000))?,
                non_negative: func.starts_with("non_negative"),
            }
        }
        "difference" | "non_negative_difference" => {
            between(1, 1)?;
            Transform::Difference {
                non_negative: func.starts_with("non_negative"),
            }
        }
        "cumulative_sum" => {
            between(1, 1)?;
            Transform::CumulativeSum
        }
        "elapsed" => {
            between(1, 2)?;
            Transform::Elapsed { unit: duration(1)? }
        }
        "moving_average" => {
            between(2, 2)?;
            match &args[1] {
                FieldExpr::Integer(n) if *n > 1 => Transform::MovingAverage(*n as usize),
                FieldExpr::Integer(n) => {
                    return Err(format!(
                        "moving_average window must be greater than 1, got {n}"
                    ));
                }
                other => {
                    return Err(format!(
                        "second argument for moving_average must be an integer, got {}",
                        go_type(other)
                    ));
                }
            }
        }
        _ => unreachable!("{func} is one of TRANSFORMS"),
    })
}

/// The Go type InfluxDB's errors name for an argument.
fn go_type(e: &FieldExpr) -> &'static str {
    match e {
        FieldExpr::Column(_) => "*influxql.VarRef",
        FieldExpr::Wildcard => "*influxql.Wildcard",
        FieldExpr::Regex(_) => "*influxql.RegexLiteral",
        FieldExpr::Integer(_) => "*influxql.IntegerLiteral",
        FieldExpr::Number(_) => "*influxql.NumberLiteral",
        FieldExpr::Duration(_) => "*influxql.DurationLiteral",
        FieldExpr::Str(_) => "*influxql.StringLiteral",
        FieldExpr::Bool(_) => "*influxql.BooleanLiteral",
        FieldExpr::Call { .. } => "*influxql.Call",
        FieldExpr::Binary { .. } => "*influxql.BinaryExpr",
    }
}

fn call_name(e: &FieldExpr) -> &str {
    match e {
        FieldExpr::Call { func, .. } => func,
        _ => "",
    }
}

/// The column InfluxDB names a field without an alias (`Field.Name`): a
/// call's function, a column's name, and for arithmetic the names of the
/// columns and outermost calls it holds, joined by `_`.
fn field_name(e: &FieldExpr) -> String {
    fn walk(e: &FieldExpr, out: &mut Vec<String>) {
        match e {
            FieldExpr::Column(c) => out.push(c.clone()),
            FieldExpr::Call { func, .. } => out.push(func.clone()),
            FieldExpr::Binary { lhs, rhs, .. } => {
                walk(lhs, out);
                walk(rhs, out);
            }
            _ => {}
        }
    }
    match e {
        FieldExpr::Call { func, .. } => func.clone(),
        FieldExpr::Column(c) => c.clone(),
        _ => {
            let mut names = Vec::new();
            walk(e, &mut names);
            names.join("_")
        }
    }
}

fn leaf_kind(
    e: &SelectExpr,
    fields: &BTreeMap<String, FieldType>,
    is_tag: &dyn Fn(&str) -> bool,
) -> Kind {
    match e {
        SelectExpr::Column(c) => match fields.get(c) {
            Some(ty) => Kind::of_field(*ty),
            None if is_tag(c) => Kind::Tag,
            None => Kind::Unknown,
        },
        SelectExpr::Call { func, field, arg } => {
            let ty = fields.get(field).copied();
            match Func::parse(func, *arg) {
                Ok(f) if ty.is_some() => f
                    .answer_type(ty)
                    .map(Kind::of_answer)
                    .unwrap_or(Kind::Unknown),
                _ => Kind::Unknown,
            }
        }
        SelectExpr::Distinct { field, count: true } if fields.contains_key(field) => Kind::Integer,
        _ => Kind::Unknown,
    }
}

/// The leaves' kinds, for the type of an expression over them.
struct Typed<'a> {
    leaves: &'a [SelectExpr],
    /// Each leaf's values' kind.
    kinds: &'a [Kind],
    /// Each leaf's field's kind (a call's argument: `mean(i::integer)`).
    fields: &'a [Kind],
}

impl Typed<'_> {
    /// The kind of `node`'s values, or InfluxDB's type error (its
    /// `validateTypes`: a side of unknown type takes the other's).
    fn kind_of(&self, node: &Node) -> Result<Kind, String> {
        Ok(match node {
            Node::Leaf(i) => self.kinds[*i],
            Node::Literal(v) => match v {
                Value::Int(_) | Value::Uint(_) => Kind::Integer,
                Value::Float(_) => Kind::Float,
                Value::Bool(_) => Kind::Boolean,
                Value::Str(_) => Kind::String,
            },
            Node::Transform { kind, input } => {
                let k = self.kind_of(input)?;
                match kind {
                    Transform::Elapsed { .. } => Kind::Integer,
                    _ if matches!(k, Kind::String | Kind::Boolean) => {
                        return Err(format!(
                            "unsupported {} iterator type: *query.{}InterruptIterator",
                            iterator_name(*kind),
                            k.word()
                        ));
                    }
                    Transform::Difference { .. } | Transform::CumulativeSum => k,
                    _ => Kind::Float,
                }
            }
            Node::Math { func, args } => {
                let kinds = args
                    .iter()
                    .map(|a| self.kind_of(a))
                    .collect::<Result<Vec<Kind>, String>>()?;
                if kinds
                    .iter()
                    .any(|k| matches!(k, Kind::String | Kind::Boolean | Kind::Tag))
                {
                    // InfluxDB answers such a call nothing.
                    return Ok(Kind::Unknown);
                }
                match kinds.as_slice() {
                    [Kind::Integer] if func.keeps_integers() => Kind::Integer,
                    _ => Kind::Float,
                }
            }
            Node::Binary { op, lhs, rhs } => {
                let l = self.kind_of(lhs)?;
                let r = self.kind_of(rhs)?;
                if l == Kind::Unknown || r == Kind::Unknown {
                    return Ok(if l == Kind::Unknown { r } else { l });
                }
                let bitwise = matches!(op, BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor);
                let fits = if bitwise {
                    (l == Kind::Integer && r == Kind::Integer)
                        || (l == Kind::Boolean && r == Kind::Boolean)
                } else {
                    l.numeric() && r.numeric()
                };
                if !fits {
                    return Err(format!(
                        "type error: {} {} {}: incompatible types: {} and {}",
                        self.describe(lhs),
                        op.symbol(),
                        self.describe(rhs),
                        l.word(),
                        r.word()
                    ));
                }
                match (l, r, op) {
                    (Kind::Boolean, _, _) => Kind::Boolean,
                    (Kind::Integer, Kind::Integer, BinaryOp::Div) => Kind::Float,
                    (Kind::Integer, Kind::Integer, _) => Kind::Integer,
                    _ => Kind::Float,
                }
            }
        })
    }

    /// An operand as InfluxDB's type error writes it: a column with its
    /// type (`host::tag`), a call with its field's (`mean(g::float)`), a
    /// literal as written.
    fn describe(&self, node: &Node) -> String {
        match node {
            Node::Leaf(i) => match &self.leaves[*i] {
                SelectExpr::Column(c) => format!("{c}::{}", self.kinds[*i].word()),
                SelectExpr::Call { func, field, .. } => {
                    format!("{func}({field}::{})", self.fields[*i].word())
                }
                SelectExpr::Distinct { field, .. } => {
                    format!("count(distinct({field}::{}))", self.fields[*i].word())
                }
                _ => String::new(),
            },
            Node::Literal(Value::Str(s)) => format!("'{s}'"),
            Node::Literal(Value::Int(i)) => i.to_string(),
            Node::Literal(Value::Float(v)) => format!("{v:.3}"),
            Node::Literal(Value::Bool(b)) => b.to_string(),
            Node::Literal(v) => format!("{v:?}"),
            Node::Binary { op, lhs, rhs } => format!(
                "{} {} {}",
                self.describe(lhs),
                op.symbol(),
                self.describe(rhs)
            ),
            Node::Transform { kind, input } => {
                format!("{}({})", transform_name(*kind), self.describe(input))
            }
            Node::Math { func, args } => format!(
                "{}({})",
                format!("{func:?}").to_ascii_lowercase(),
                args.iter()
                    .map(|a| self.describe(a))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn transform_name(t: Transform) -> &'static str {
    match t {
        Transform::Derivative {
            non_negative: false,
            ..
        } => "derivative",
        Transform::Derivative {
            non_negative: true, ..
        } => "non_negative_derivative",
        Transform::Difference {
            non_negative: false,
        } => "difference",
        Transform::Difference { non_negative: true } => "non_negative_difference",
        Transform::MovingAverage(_) => "moving_average",
        Transform::CumulativeSum => "cumulative_sum",
        Transform::Elapsed { .. } => "elapsed",
    }
}

/// The name InfluxDB's iterator of a transformation gives in its errors
/// (`newDerivativeIterator` serves both derivatives).
fn iterator_name(t: Transform) -> &'static str {
    match t {
        Transform::Derivative { .. } => "derivative",
        Transform::Difference { .. } => "difference",
        Transform::MovingAverage(_) => "moving average",
        Transform::CumulativeSum => "cumulative sum",
        Transform::Elapsed { .. } => "elapsed",
    }
}

/// A column's value at one row of the leaves' answer.
#[derive(Debug, Clone)]
enum Slot {
    /// The column has no point at this row (a transformation that emitted
    /// nothing there): the row is answered only if another column has.
    Absent,
    /// A point whose value is null.
    Null,
    Value(Value),
}

/// `node`'s column over `rows` (the leaves' answer of one series, in the
/// statement's order).
fn eval(node: &Node, rows: &[Vec<Cell>]) -> Vec<Slot> {
    match node {
        Node::Leaf(i) => rows
            .iter()
            .map(|r| match r.get(i + 1) {
                Some(Cell::Value(v)) => Slot::Value(v.clone()),
                _ => Slot::Null,
            })
            .collect(),
        // A literal alone answers nothing: a binary with it has points
        // where its other side has.
        Node::Literal(_) => vec![Slot::Absent; rows.len()],
        Node::Binary { op, lhs, rhs } => {
            let l = operand(lhs, rows);
            let r = operand(rhs, rows);
            (0..rows.len())
                .map(|i| {
                    if !l.present(i) && !r.present(i) {
                        return Slot::Absent;
                    }
                    match (l.at(i), r.at(i)) {
                        (Slot::Value(a), Slot::Value(b)) => {
                            binary(*op, a, b).map_or(Slot::Null, Slot::Value)
                        }
                        // Beside a boolean a missing value is false, as
                        // InfluxDB's evaluation takes it.
                        (Slot::Value(b @ Value::Bool(_)), _) => {
                            binary(*op, b, &Value::Bool(false)).map_or(Slot::Null, Slot::Value)
                        }
                        (_, Slot::Value(b @ Value::Bool(_))) => {
                            binary(*op, &Value::Bool(false), b).map_or(Slot::Null, Slot::Value)
                        }
                        _ => Slot::Null,
                    }
                })
                .collect()
        }
        Node::Transform { kind, input } => {
            let input = eval(input, rows);
            let times: Vec<i64> = rows.iter().map(|r| row_time(r)).collect();
            transform(*kind, &times, &input)
        }
        Node::Math { func, args } => {
            let args: Vec<Operand> = args.iter().map(|a| operand(a, rows)).collect();
            (0..rows.len())
                .map(|i| {
                    if !args.iter().any(|a| a.present(i)) {
                        return Slot::Absent;
                    }
                    let values: Option<Vec<Num>> = args
                        .iter()
                        .map(|a| match a.at(i) {
                            Slot::Value(v) => number(v),
                            _ => None,
                        })
                        .collect();
                    values
                        .and_then(|v| func.apply(&v))
                        .map_or(Slot::Null, Slot::Value)
                })
                .collect()
        }
    }
}

/// A binary's operand: a column, or a literal every row shares.
enum Operand {
    Column(Vec<Slot>),
    Scalar(Slot),
}

impl Operand {
    fn at(&self, i: usize) -> &Slot {
        match self {
            Operand::Column(c) => &c[i],
            Operand::Scalar(s) => s,
        }
    }

    /// Whether the operand has a point at row `i` (a literal never has:
    /// it takes the other side's).
    fn present(&self, i: usize) -> bool {
        match self {
            Operand::Column(c) => !matches!(c[i], Slot::Absent),
            Operand::Scalar(_) => false,
        }
    }
}

fn operand(node: &Node, rows: &[Vec<Cell>]) -> Operand {
    match node {
        Node::Literal(v) => Operand::Scalar(Slot::Value(v.clone())),
        _ => Operand::Column(eval(node, rows)),
    }
}

/// A value as a number, if it is one.
fn number(v: &Value) -> Option<Num> {
    match v {
        Value::Int(i) => Some(Num::Int(*i)),
        Value::Uint(u) => Some(Num::Int(*u as i64)),
        Value::Float(f) => Some(Num::Float(*f)),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

/// `a op b` as InfluxDB 1.6 works it out: integers stay integers (but
/// `/` answers a float), a float on either side makes a float, and a
/// division by zero answers 0.
fn binary(op: BinaryOp, a: &Value, b: &Value) -> Option<Value> {
    if let (Value::Bool(x), Value::Bool(y)) = (a, b) {
        return match op {
            BinaryOp::BitAnd => Some(Value::Bool(x & y)),
            BinaryOp::BitOr => Some(Value::Bool(x | y)),
            BinaryOp::BitXor => Some(Value::Bool(x ^ y)),
            _ => None,
        };
    }
    let (a, b) = (number(a)?, number(b)?);
    Some(match (a, b) {
        (Num::Int(x), Num::Int(y)) => match op {
            BinaryOp::Add => Value::Int(x.wrapping_add(y)),
            BinaryOp::Sub => Value::Int(x.wrapping_sub(y)),
            BinaryOp::Mul => Value::Int(x.wrapping_mul(y)),
            BinaryOp::Div => {
                if y == 0 {
                    Value::Float(0.0)
                } else {
                    Value::Float(x as f64 / y as f64)
                }
            }
            BinaryOp::Mod => {
                if y == 0 {
                    Value::Int(0)
                } else {
                    Value::Int(x.wrapping_rem(y))
                }
            }
            BinaryOp::BitAnd => Value::Int(x & y),
            BinaryOp::BitOr => Value::Int(x | y),
            BinaryOp::BitXor => Value::Int(x ^ y),
        },
        (a, b) => {
            let as_f = |n: Num| match n {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let (x, y) = (as_f(a), as_f(b));
            match op {
                BinaryOp::Add => Value::Float(x + y),
                BinaryOp::Sub => Value::Float(x - y),
                BinaryOp::Mul => Value::Float(x * y),
                BinaryOp::Div => Value::Float(if y == 0.0 { 0.0 } else { x / y }),
                // Go's math.Mod: NaN by zero, which InfluxDB answers as null.
                BinaryOp::Mod if y == 0.0 => return None,
                BinaryOp::Mod => Value::Float(x % y),
                BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor => return None,
            }
        }
    })
}

/// A transformation over one series' column `input` (in the statement's
/// order, `times` its rows' times): a slot per row, `Absent` where it
/// emits nothing, as InfluxDB 1.6's reducers work (query/functions.go).
/// Nulls are skipped, as its transformations skip the empty buckets
/// `fill(null)` made. `derivative` and `difference` keep the first of
/// points of one time (series merged); the others take every point.
/// Descending, `derivative` divides by the time going forward and
/// `elapsed` answers negative times.
fn transform(kind: Transform, times: &[i64], input: &[Slot]) -> Vec<Slot> {
    let mut out = vec![Slot::Absent; input.len()];
    let mut prev: Option<(i64, Num)> = None;
    let mut prev_time: Option<i64> = None;
    // moving_average: the window (as a ring), where the next value goes,
    // and its running sum, kept as InfluxDB keeps it (an integer sum for
    // integers; a float sum taking the leaving value out, then adding).
    let mut window: Vec<Num> = Vec::new();
    let mut at = 0usize;
    let mut sum: Option<Num> = None;
    for (i, slot) in input.iter().enumerate() {
        let Slot::Value(v) = slot else {
            continue;
        };
        let t = times[i];
        if let Transform::Elapsed { unit } = kind {
            if let Some(pt) = prev_time {
                out[i] = Slot::Value(Value::Int((t - pt) / unit));
            }
            prev_time = Some(t);
            continue;
        }
        let Some(n) = number(v) else {
            continue;
        };
        match kind {
            Transform::Derivative { unit, non_negative } => {
                if prev.is_some_and(|(pt, _)| pt == t) {
                    continue;
                }
                if let Some((pt, p)) = prev {
                    let diff = match (n, p) {
                        (Num::Int(x), Num::Int(y)) => x.wrapping_sub(y) as f64,
                        (x, y) => as_f64(x) - as_f64(y),
                    };
                    let elapsed = (t - pt).abs() as f64;
                    if !(non_negative && diff < 0.0) {
                        out[i] = Slot::Value(Value::Float(diff / (elapsed / unit as f64)));
                    }
                }
            }
            Transform::Difference { non_negative } => {
                if prev.is_some_and(|(pt, _)| pt == t) {
                    continue;
                }
                if let Some((_, p)) = prev {
                    let d = match (n, p) {
                        (Num::Int(x), Num::Int(y)) => Num::Int(x.wrapping_sub(y)),
                        (x, y) => Num::Float(as_f64(x) - as_f64(y)),
                    };
                    if !(non_negative && as_f64(d) < 0.0) {
                        out[i] = Slot::Value(num_value(d));
                    }
                }
            }
            Transform::MovingAverage(size) => {
                let leaving = if window.len() < size {
                    window.push(n);
                    None
                } else {
                    Some(std::mem::replace(&mut window[at], n))
                };
                at = (at + 1) % size;
                sum = Some(match (sum, leaving, n) {
                    (None, _, n) => n,
                    (Some(Num::Int(s)), Some(Num::Int(l)), Num::Int(x)) => {
                        Num::Int(s.wrapping_sub(l).wrapping_add(x))
                    }
                    (Some(Num::Int(s)), None, Num::Int(x)) => Num::Int(s.wrapping_add(x)),
                    (Some(s), leaving, x) => {
                        let mut f = as_f64(s);
                        if let Some(l) = leaving {
                            f -= as_f64(l);
                        }
                        Num::Float(f + as_f64(x))
                    }
                });
                if window.len() == size
                    && let Some(s) = sum
                {
                    out[i] = Slot::Value(Value::Float(as_f64(s) / size as f64));
                }
            }
            Transform::CumulativeSum => {
                let s = match (sum, n) {
                    (None, n) => n,
                    (Some(Num::Int(x)), Num::Int(y)) => Num::Int(x.wrapping_add(y)),
                    (Some(x), y) => Num::Float(as_f64(x) + as_f64(y)),
                };
                sum = Some(s);
                out[i] = Slot::Value(num_value(s));
            }
            Transform::Elapsed { .. } => {}
        }
        prev = Some((t, n));
    }
    out
}

fn as_f64(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

fn num_value(n: Num) -> Value {
    match n {
        Num::Int(i) => Value::Int(i),
        Num::Float(f) => Value::Float(f),
    }
}
