//! What is wrong with a price entry, said so that the user can fix it.

use std::fmt;
use std::ops::Range;

use super::rates::PRICE_FIELDS;

/// A bad price entry: which model and field, what is wrong and how to fix it, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PriceError {
    model: String,
    field: Option<String>,
    problem: Problem,
    span: Option<Range<usize>>,
}

/// What is wrong with a price entry; its text says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The text is not TOML (or not the expected shape).
    Syntax { message: String },
    /// The entry is not a table.
    NotATable { found: &'static str },
    /// A price is not a number.
    NotANumber { found: &'static str },
    /// A price or multiplier is below zero.
    Negative,
    /// More decimal places than the table keeps.
    TooPrecise { places: u8 },
    /// Above $1,000,000 per 1M tokens or a 100x multiplier: almost surely the wrong unit.
    TooLarge,
    /// A tier is neither a positive multiplier nor a table of rates.
    BadTier { found: &'static str },
    /// `long_context` is not a table of `above` and three multipliers.
    BadLongContext,
    /// A text field holds something else.
    NotAString { found: &'static str },
    /// `checked` is not a YYYY-MM-DD date.
    BadDate,
    /// A required field is absent.
    Missing,
    /// A field this table does not know.
    UnknownField,
    /// An entry with both `alias` and prices.
    AliasWithPrices,
    /// An alias whose target has no price.
    AliasToUnknown { target: String },
    /// An alias whose target is itself an alias.
    AliasToAlias { target: String },
    /// Two entries whose names match once trimmed and lower-cased.
    Duplicate { other: String },
    /// An entry named "".
    EmptyName,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { message } => write!(f, "{message}"),
            Self::NotATable { found } => write!(
                f,
                "is {found}; write a table with `input` and `output` in US dollars per 1M tokens, or `alias = \"gpt-5.5\"`"
            ),
            Self::NotANumber { found } => {
                write!(f, "is {found}; write a number of US dollars per 1M tokens, such as 2.5, without quotes")
            }
            Self::Negative => write!(f, "is negative; prices and multipliers are zero or more, such as 2.5"),
            Self::TooPrecise { places } => write!(f, "has more than {places} decimal places; round it to {places}"),
            Self::TooLarge => write!(
                f,
                "is too large; prices are US dollars per 1M tokens (at most 1000000) and multipliers at most 100"
            ),
            Self::BadTier { found } => write!(
                f,
                "is {found}; write a multiplier of the standard prices such as 0.5, or a table with input and output"
            ),
            Self::BadLongContext => write!(
                f,
                "must be a table such as {{ above = 272000, input = 2.0, cached_input = 2.0, output = 1.5 }}"
            ),
            Self::NotAString { found } => write!(f, "is {found}; write it in quotes"),
            Self::BadDate => write!(f, "is not a date; write it as \"YYYY-MM-DD\""),
            Self::Missing => write!(f, "is missing; add it, or write `alias = \"<priced model>\"` instead of prices"),
            Self::UnknownField => write!(
                f,
                "is not a price field; the fields are alias, {}, source and checked",
                PRICE_FIELDS.join(", ")
            ),
            Self::AliasWithPrices => {
                write!(f, "is set beside `alias`; keep either the alias (priced like its target) or the prices")
            }
            Self::AliasToUnknown { target } => write!(
                f,
                "names {target:?}, which has no price; alias a model of the price table, or give this entry its own input and output"
            ),
            Self::AliasToAlias { target } => {
                write!(f, "names {target:?}, which is itself an alias; point it at the priced model directly")
            }
            Self::Duplicate { other } => write!(
                f,
                "is priced twice (also as {other:?}; names match ignoring case and spaces); keep one entry"
            ),
            Self::EmptyName => write!(f, "has an empty model name; write the name the provider reports, such as \"gpt-5.5\""),
        }
    }
}

impl fmt::Display for PriceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.problem, &self.field) {
            (Problem::Syntax { .. }, _) => write!(f, "price table: {}", self.problem),
            (_, Some(field)) => write!(f, "prices.{:?}.{field} {}", self.model, self.problem),
            (_, None) => write!(f, "prices.{:?} {}", self.model, self.problem),
        }
    }
}

impl PriceError {
    pub(super) fn new(model: &str, field: Option<&str>, span: Option<&Range<usize>>, problem: Problem) -> Self {
        Self { model: model.to_owned(), field: field.map(str::to_owned), problem, span: span.cloned() }
    }

    pub(super) fn syntax(error: &toml::de::Error) -> Self {
        let problem = Problem::Syntax { message: error.message().to_owned() };
        Self { model: String::new(), field: None, problem, span: error.span() }
    }

    /// The model the entry is for, as written.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The field at fault, if one is.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// What is wrong.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The byte range in the parsed text, when it was parsed from text.
    pub fn span(&self) -> Option<Range<usize>> {
        self.span.clone()
    }

    /// The 1-based line and column in `text` (the text the overrides were parsed from).
    pub fn line_col(&self, text: &str) -> Option<(usize, usize)> {
        let before = text.get(..self.span.as_ref()?.start)?;
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        Some((line, column))
    }
}
