//! The little the store's logic needs of a SQL database, so that one body of queries and
//! rules serves every backend: statements with numbered parameters (`?1`, written once and
//! given to each backend in its own syntax), rows of plain values, and the one place a
//! backend's dialect differs.
//!
//! Only integers, text, bytes and NULL cross this line: booleans are `0` and `1`, JSON is
//! text, times are Unix milliseconds. Every backend's schema stores exactly these, so a value
//! reads back the same whichever database holds it.

use crate::error::{Result, StoreError};

/// A value read from a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

/// A parameter of a statement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl From<i64> for Param<'_> {
    fn from(value: i64) -> Self {
        Self::Int(value)
    }
}

impl From<u32> for Param<'_> {
    fn from(value: u32) -> Self {
        Self::Int(i64::from(value))
    }
}

impl From<bool> for Param<'_> {
    fn from(value: bool) -> Self {
        Self::Int(i64::from(value))
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(value: &'a str) -> Self {
        Self::Text(value)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(value: &'a String) -> Self {
        Self::Text(value)
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(value: &'a [u8]) -> Self {
        Self::Bytes(value)
    }
}

impl<'a> From<&'a Vec<u8>> for Param<'a> {
    fn from(value: &'a Vec<u8>) -> Self {
        Self::Bytes(value)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Self::Null, Into::into)
    }
}

impl<'a> From<&'a Option<String>> for Param<'a> {
    fn from(value: &'a Option<String>) -> Self {
        value.as_deref().map_or(Self::Null, Self::Text)
    }
}

/// A statement's parameters, in order: `args![service, env, 3]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::sql::Param::from($value)),*][..]
    };
}
pub(crate) use args;

/// What sets one backend's SQL apart, where the shared statements cannot avoid it (a row
/// lock, which SQLite's one writer needs not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A database inside one transaction, as the store's logic sees it.
pub(crate) trait Db {
    fn dialect(&self) -> Dialect;

    /// Runs a statement; the number of rows it changed.
    fn execute(&self, sql: &str, args: &[Param<'_>]) -> Result<u64>;

    /// Runs a query; every row, each as its values in column order.
    fn query(&self, sql: &str, args: &[Param<'_>]) -> Result<Vec<Row>>;
}

/// What the store's logic asks of a [`Db`], written once over its two calls.
pub(crate) trait DbExt: Db {
    /// Every row, each made a `T`.
    fn query_all<T>(
        &self,
        sql: &str,
        args: &[Param<'_>],
        f: impl Fn(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.query(sql, args)?.iter().map(f).collect()
    }

    /// The first row, made a `T`, if there is one.
    fn query_one<T>(
        &self,
        sql: &str,
        args: &[Param<'_>],
        f: impl Fn(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        self.query(sql, args)?.first().map(f).transpose()
    }

    /// The first column of the first row: for `COUNT(*)`, `MAX(...)` and the like.
    fn query_value<T: FromValue>(&self, sql: &str, args: &[Param<'_>]) -> Result<T> {
        match self.query(sql, args)?.first() {
            Some(row) => row.get(0),
            None => Err(StoreError::Corrupt(format!("no row from {sql}"))),
        }
    }

    /// An `INSERT ... RETURNING id`: the new row's id.
    fn insert_returning_id(&self, sql: &str, args: &[Param<'_>]) -> Result<i64> {
        self.query_value(sql, args)
    }
}

impl<D: Db + ?Sized> DbExt for D {}

/// One row's values, in column order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    /// Column `index` as a `T`; a type the column does not hold is [`StoreError::Corrupt`].
    pub(crate) fn get<T: FromValue>(&self, index: usize) -> Result<T> {
        let value = self.0.get(index).unwrap_or(&Value::Null);
        T::from_value(value).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "column {index} holds {value:?}, not {}",
                std::any::type_name::<T>()
            ))
        })
    }
}

/// A Rust type a column's value reads as.
pub(crate) trait FromValue: Sized {
    fn from_value(value: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Text(text) => Some(text.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Bytes(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_their_types_and_nothing_else() {
        let row = Row(vec![
            Value::Int(1),
            Value::Text("a".into()),
            Value::Null,
            Value::Bytes(vec![1]),
        ]);
        assert_eq!(row.get::<i64>(0).ok(), Some(1));
        assert_eq!(row.get::<bool>(0).ok(), Some(true));
        assert_eq!(row.get::<String>(1).ok().as_deref(), Some("a"));
        assert_eq!(row.get::<Option<String>>(2).ok(), Some(None));
        assert_eq!(row.get::<Vec<u8>>(3).ok(), Some(vec![1]));
        assert!(matches!(row.get::<i64>(1), Err(StoreError::Corrupt(_))));
        assert!(matches!(row.get::<String>(2), Err(StoreError::Corrupt(_))));
        assert!(matches!(row.get::<i64>(9), Err(StoreError::Corrupt(_))));
        let two = Row(vec![Value::Int(2)]);
        assert!(two.get::<bool>(0).is_err());
    }
}
