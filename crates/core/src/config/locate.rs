//! Where in the config file's text a problem is: a line and a column (both from 1), for messages.

use toml_edit::{ImDocument, Item};

use crate::pools::Place;

/// `" (line L, column C)"`, or nothing when the place is unknown.
pub(super) fn suffix(at: Option<(usize, usize)>) -> String {
    at.map_or_else(String::new, |(line, col)| format!(" (line {line}, column {col})"))
}

/// The line and column of byte `offset` in `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, col)
}

/// The line and column of a pool problem's place in `text`.
pub(super) fn place(text: &str, place: &Place) -> Option<(usize, usize)> {
    let doc = ImDocument::parse(text).ok()?;
    let root = doc.as_table();
    let table = |name: &str, i: usize| root.get(name).and_then(Item::as_array_of_tables).and_then(|a| a.get(i));
    let in_list = |i: usize, list: &str, j: usize| {
        let pool = table("pools", i)?;
        let array = pool.get(list).and_then(Item::as_array);
        array.and_then(|a| a.get(j)).and_then(|v| v.span()).or_else(|| pool.get(list).and_then(Item::span))
    };
    let span = match *place {
        Place::Name(i) => table("pools", i).and_then(|t| t.get("name")).and_then(Item::span),
        Place::Key(i, j) => in_list(i, "keys", j),
        Place::Fallback(i, j) => in_list(i, "fallback", j),
        Place::Pool(i) => table("pools", i).and_then(|t| t.span()),
        Place::Token(i) => table("tokens", i).and_then(|t| t.get("pool").and_then(Item::span).or_else(|| t.span())),
    }?;
    Some(line_col(text, span.start))
}

/// Where a value that does not read is, when the error points at its table's header instead: a key's
/// and a pool's settings are flattened into their tables (`key_settings`), and serde reports their
/// errors at the table. Each of the table's values is read alone as the settings it belongs to; the
/// first that fails is the one.
pub(super) fn flattened_value(text: &str, offset: usize) -> Option<(usize, usize)> {
    let doc = ImDocument::parse(text).ok()?;
    let tables = doc.as_table().iter().filter_map(|(_, item)| item.as_array_of_tables()).flat_map(|a| a.iter());
    let table = tables.into_iter().find(|t| t.span().is_some_and(|s| s.start == offset))?;
    let bad = table.iter().find(|(field, item)| {
        let Some(value) = item.as_value() else { return false };
        let one = format!("{field} = {value}");
        toml::from_str::<crate::key_settings::KeySettings>(&one).is_err()
            || toml::from_str::<crate::budget::MoneyBudget>(&one).is_err()
    })?;
    let span = bad.1.span()?;
    Some(line_col(text, span.start))
}
