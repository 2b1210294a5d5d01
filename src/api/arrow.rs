//! Apache Arrow answers (`Accept: application/vnd.apache.arrow.stream`).
//!
//! Rows are "long": one Arrow row per cell, so a schema is known before the
//! first row is read and every answer of a table has the same columns:
//!
//! | column | type |
//! |---|---|
//! | `row` | binary: the whole row key |
//! | `bucket` | uint16, only for salted tables |
//! | one per key field | utf8 (string), timestamp[unit, UTC] (timestamps, in the table's time unit), uint64 (integers, uniquifiers); null when the key does not decode |
//! | `family`, `qualifier` | utf8 |
//! | `timestamp` | timestamp[ms, UTC]: the cell's version |
//! | `value_float`, `value_int`, `value_uint`, `value_bool`, `value_string` | the typed value; exactly one is set |
//! | `value_bytes` | binary: values written raw (not typed) |
//!
//! Aggregates have one Arrow row per series, field and window: the series
//! identity fields, `field`, `window_start` (null without downsampling) and
//! one float64 column per aggregator asked for.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder, UInt16Builder, UInt64Builder,
};
use arrow_array::{
    ArrayRef, RecordBatch, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampNanosecondArray, TimestampSecondArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::key::{self, FieldEncoding, FieldValue, KeySchema};
use crate::query::{AggFn, SeriesAggregate};
use crate::region::read::RowCells;
use crate::value::Value;

/// Cells per record batch: big enough to amortise the per-batch framing,
/// small enough that a batch is a few hundred KiB.
pub const BATCH_CELLS: usize = 8192;

const UTC: &str = "UTC";

/// Cell versions: epoch milliseconds.
fn time_type() -> DataType {
    time_type_in(key::TimeUnit::Milliseconds)
}

/// Key time fields and aggregate windows: the table's unit.
fn time_type_in(unit: key::TimeUnit) -> DataType {
    DataType::Timestamp(arrow_unit(unit), Some(UTC.into()))
}

fn arrow_unit(unit: key::TimeUnit) -> TimeUnit {
    match unit {
        key::TimeUnit::Seconds => TimeUnit::Second,
        key::TimeUnit::Milliseconds => TimeUnit::Millisecond,
        key::TimeUnit::Microseconds => TimeUnit::Microsecond,
        key::TimeUnit::Nanoseconds => TimeUnit::Nanosecond,
    }
}

/// A timestamp column of `unit`; times past i64 (Arrow's range) are null.
fn time_array(times: Vec<Option<u64>>, unit: key::TimeUnit) -> ArrayRef {
    let times = times
        .into_iter()
        .map(|t| t.and_then(|t| i64::try_from(t).ok()));
    match unit {
        key::TimeUnit::Seconds => {
            Arc::new(TimestampSecondArray::from_iter(times).with_timezone(UTC))
        }
        key::TimeUnit::Milliseconds => {
            Arc::new(TimestampMillisecondArray::from_iter(times).with_timezone(UTC))
        }
        key::TimeUnit::Microseconds => {
            Arc::new(TimestampMicrosecondArray::from_iter(times).with_timezone(UTC))
        }
        key::TimeUnit::Nanoseconds => {
            Arc::new(TimestampNanosecondArray::from_iter(times).with_timezone(UTC))
        }
    }
}

fn field_type(enc: &FieldEncoding, unit: key::TimeUnit) -> DataType {
    match enc {
        FieldEncoding::String { .. } => DataType::Utf8,
        FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp => time_type_in(unit),
        FieldEncoding::Uint { .. } | FieldEncoding::Uniquifier { .. } => DataType::UInt64,
    }
}

enum KeyColumn {
    Str(StringBuilder),
    Time(Vec<Option<u64>>, key::TimeUnit),
    Uint(UInt64Builder),
}

impl KeyColumn {
    fn new(enc: &FieldEncoding, unit: key::TimeUnit) -> Self {
        match enc {
            FieldEncoding::String { .. } => KeyColumn::Str(StringBuilder::new()),
            FieldEncoding::Uint { .. } | FieldEncoding::Uniquifier { .. } => {
                KeyColumn::Uint(UInt64Builder::new())
            }
            FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp => {
                KeyColumn::Time(Vec::new(), unit)
            }
        }
    }

    fn push(&mut self, v: Option<&FieldValue>) {
        match (self, v) {
            (KeyColumn::Str(b), Some(FieldValue::Str(s))) => b.append_value(s),
            (KeyColumn::Time(b, _), Some(FieldValue::Uint(u))) => b.push(Some(*u)),
            (KeyColumn::Uint(b), Some(FieldValue::Uint(u))) => b.append_value(*u),
            (KeyColumn::Str(b), _) => b.append_null(),
            (KeyColumn::Time(b, _), _) => b.push(None),
            (KeyColumn::Uint(b), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            KeyColumn::Str(b) => Arc::new(b.finish()),
            KeyColumn::Time(b, unit) => time_array(std::mem::take(b), *unit),
            KeyColumn::Uint(b) => Arc::new(b.finish()),
        }
    }
}

/// The Arrow schema of a table's raw rows (see the module docs).
pub fn row_schema(key: &KeySchema) -> Schema {
    let mut fields = vec![Field::new("row", DataType::Binary, false)];
    if key.salt.is_some() {
        fields.push(Field::new("bucket", DataType::UInt16, true));
    }
    for f in &key.fields {
        fields.push(Field::new(
            &f.name,
            field_type(&f.encoding, key.time_unit),
            true,
        ));
    }
    fields.extend([
        Field::new("family", DataType::Utf8, false),
        Field::new("qualifier", DataType::Utf8, false),
        Field::new("timestamp", time_type(), false),
        Field::new("value_float", DataType::Float64, true),
        Field::new("value_int", DataType::Int64, true),
        Field::new("value_uint", DataType::UInt64, true),
        Field::new("value_bool", DataType::Boolean, true),
        Field::new("value_string", DataType::Utf8, true),
        Field::new("value_bytes", DataType::Binary, true),
    ]);
    Schema::new(fields)
}

/// Builds record batches of cells from rows.
pub struct RowBatches {
    schema: SchemaRef,
    key: KeySchema,
    row: BinaryBuilder,
    bucket: Option<UInt16Builder>,
    fields: Vec<KeyColumn>,
    family: StringBuilder,
    qualifier: StringBuilder,
    timestamp: TimestampMillisecondBuilder,
    float: Float64Builder,
    int: Int64Builder,
    uint: UInt64Builder,
    boolean: BooleanBuilder,
    string: StringBuilder,
    bytes: BinaryBuilder,
    cells: usize,
}

impl RowBatches {
    pub fn new(key: &KeySchema, schema: SchemaRef) -> Self {
        RowBatches {
            schema,
            key: key.clone(),
            row: BinaryBuilder::new(),
            bucket: key.salt.as_ref().map(|_| UInt16Builder::new()),
            fields: key
                .fields
                .iter()
                .map(|f| KeyColumn::new(&f.encoding, key.time_unit))
                .collect(),
            family: StringBuilder::new(),
            qualifier: StringBuilder::new(),
            timestamp: TimestampMillisecondBuilder::new().with_timezone(UTC),
            float: Float64Builder::new(),
            int: Int64Builder::new(),
            uint: UInt64Builder::new(),
            boolean: BooleanBuilder::new(),
            string: StringBuilder::new(),
            bytes: BinaryBuilder::new(),
            cells: 0,
        }
    }

    /// Cells buffered since the last batch.
    pub fn cells(&self) -> usize {
        self.cells
    }

    pub fn push(&mut self, row: &impl RowCells) {
        let decoded = self.key.decode(row.key()).ok();
        for cell in row.cells() {
            self.row.append_value(row.key());
            if let Some(b) = self.bucket.as_mut() {
                match decoded.as_ref().and_then(|d| d.bucket) {
                    Some(x) => b.append_value(x as u16),
                    None => b.append_null(),
                }
            }
            for (i, col) in self.fields.iter_mut().enumerate() {
                col.push(
                    decoded
                        .as_ref()
                        .and_then(|d| d.fields.get(i))
                        .map(|(_, v)| v),
                );
            }
            self.family
                .append_value(String::from_utf8_lossy(cell.family));
            self.qualifier
                .append_value(String::from_utf8_lossy(cell.qualifier));
            self.timestamp.append_value(cell.timestamp as i64);
            let value = Value::decode(cell.value);
            match &value {
                Some(Value::Float(v)) => self.float.append_value(*v),
                _ => self.float.append_null(),
            }
            match &value {
                Some(Value::Int(v)) => self.int.append_value(*v),
                _ => self.int.append_null(),
            }
            match &value {
                Some(Value::Uint(v)) => self.uint.append_value(*v),
                _ => self.uint.append_null(),
            }
            match &value {
                Some(Value::Bool(v)) => self.boolean.append_value(*v),
                _ => self.boolean.append_null(),
            }
            match &value {
                Some(Value::Str(v)) => self.string.append_value(v),
                _ => self.string.append_null(),
            }
            match &value {
                None => self.bytes.append_value(cell.value),
                Some(_) => self.bytes.append_null(),
            }
            self.cells += 1;
        }
    }

    /// The buffered cells as one record batch; the builders start over.
    pub fn take(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = vec![Arc::new(self.row.finish())];
        if let Some(b) = self.bucket.as_mut() {
            columns.push(Arc::new(b.finish()));
        }
        columns.extend(self.fields.iter_mut().map(KeyColumn::finish));
        columns.push(Arc::new(self.family.finish()));
        columns.push(Arc::new(self.qualifier.finish()));
        columns.push(Arc::new(self.timestamp.finish()));
        columns.push(Arc::new(self.float.finish()));
        columns.push(Arc::new(self.int.finish()));
        columns.push(Arc::new(self.uint.finish()));
        columns.push(Arc::new(self.boolean.finish()));
        columns.push(Arc::new(self.string.finish()));
        columns.push(Arc::new(self.bytes.finish()));
        self.cells = 0;
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

/// Aggregates as one record batch (see the module docs). The series
/// columns are the key schema's identity fields.
pub fn aggregate_batch(
    key: &KeySchema,
    functions: &[AggFn],
    aggregates: &[SeriesAggregate],
) -> Result<RecordBatch, ArrowError> {
    let identity: Vec<_> = key
        .fields
        .iter()
        .filter(|f| f.encoding.is_identity())
        .collect();
    let mut fields: Vec<Field> = identity
        .iter()
        .map(|f| Field::new(&f.name, field_type(&f.encoding, key.time_unit), true))
        .collect();
    fields.push(Field::new("field", DataType::Utf8, false));
    fields.push(Field::new(
        "window_start",
        time_type_in(key.time_unit),
        true,
    ));
    for f in functions {
        fields.push(Field::new(agg_name(*f), DataType::Float64, true));
    }
    let mut series_cols: Vec<KeyColumn> = identity
        .iter()
        .map(|f| KeyColumn::new(&f.encoding, key.time_unit))
        .collect();
    let mut field = StringBuilder::new();
    let mut window = Vec::with_capacity(aggregates.len());
    let mut values: Vec<Float64Builder> = functions.iter().map(|_| Float64Builder::new()).collect();
    for a in aggregates {
        for (col, f) in series_cols.iter_mut().zip(&identity) {
            col.push(a.series.iter().find(|(n, _)| *n == f.name).map(|(_, v)| v));
        }
        field.append_value(&a.field);
        window.push(a.window);
        for (b, f) in values.iter_mut().zip(functions) {
            match a.values.iter().find(|(g, _)| g == f) {
                Some((_, v)) => b.append_value(*v),
                None => b.append_null(),
            }
        }
    }
    let mut columns: Vec<ArrayRef> = series_cols.iter_mut().map(KeyColumn::finish).collect();
    columns.push(Arc::new(field.finish()));
    columns.push(time_array(window, key.time_unit));
    columns.extend(values.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

pub fn agg_name(f: AggFn) -> &'static str {
    match f {
        AggFn::Min => "min",
        AggFn::Max => "max",
        AggFn::Sum => "sum",
        AggFn::Count => "count",
        AggFn::Avg => "avg",
        AggFn::First => "first",
        AggFn::Last => "last",
    }
}
