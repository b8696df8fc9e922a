//! Hand-computed costs, name resolution, every bad-input error, and the embedded table itself.

use serde::Deserialize;

use super::*;

/// A config file holding only `[prices]`, parsed the way the config loader will (keeping spans).
#[derive(Deserialize)]
struct ConfigWithPrices {
    #[serde(default)]
    prices: PriceOverrides,
}

fn overrides(text: &str) -> PriceOverrides {
    toml::from_str::<ConfigWithPrices>(text).expect("test config is TOML").prices
}

fn empty() -> PriceTable {
    PriceTable::parse_embedded("[prices]\n").expect("an empty table parses")
}

/// The embedded table with `text` over it.
fn builtin_with(text: &str) -> PriceTable {
    PriceTable::builtin().with_overrides(&overrides(text)).expect("test prices are valid")
}

/// A table of only `text`'s entries.
fn only(text: &str) -> PriceTable {
    empty().with_overrides(&overrides(text)).expect("test prices are valid")
}

fn error(text: &str) -> PriceError {
    empty().with_overrides(&overrides(text)).expect_err("test prices are invalid")
}

fn usage(input: u64, cached: u64, output: u64) -> Usage {
    Usage { input, cached, output, ..Usage::default() }
}

/// `usage` billed in `tier`.
fn at(usage: Usage, tier: ServiceTier) -> Usage {
    Usage { tier, ..usage }
}

fn nanos(cost: Cost) -> u64 {
    cost.priced().expect("the request is priced").nanos()
}

fn builtin_cost(model: &str, usage: &Usage, tier: ServiceTier) -> Cost {
    PriceTable::builtin().cost(model, &at(*usage, tier), DAY)
}

const STD: ServiceTier = ServiceTier::Standard;

/// 2026-12-06, as `clock::utc_day` counts it: the day the tests price requests on.
const DAY: u32 = 20_793;
/// 2027-02-28 and 2027-03-01: the last day of ultrafast at 3x, and the first at 6x.
const LAST_3X: u32 = 20_877;
const FIRST_6X: u32 = 20_878;

#[test]
fn input_and_output_are_priced_per_million_tokens() {
    let table = only("[prices.m]\ninput = 2.0\ncached_input = 0.5\noutput = 8.0\n");
    // 1000 x $2/1M + 500 x $8/1M = $0.002 + $0.004
    assert_eq!(nanos(table.cost("m", &at(usage(1000, 0, 500), STD), DAY)), 6_000_000);
}

#[test]
fn cached_share_of_the_input_is_priced_as_cached() {
    // gpt-5.5: 2000 fresh x $5 + 8000 cached x $0.50 + 1000 out x $30, per 1M = 0.01 + 0.004 + 0.03
    assert_eq!(nanos(builtin_cost("gpt-5.5", &usage(10_000, 8_000, 1_000), STD)), 44_000_000);
}

#[test]
fn a_model_without_a_cached_price_bills_cached_tokens_as_input() {
    // gpt-5.5-pro has no cached rate: 1000 input x $30/1M, cached or not.
    assert_eq!(nanos(builtin_cost("gpt-5.5-pro", &usage(1000, 1000, 0), STD)), 30_000_000);
    assert_eq!(nanos(builtin_cost("gpt-5.5-pro", &usage(1000, 0, 0), STD)), 30_000_000);
}

#[test]
fn reasoning_tokens_are_billed_once_as_output() {
    let answer = serde_json::json!({
        "input_tokens": 1000,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": 1200,
        "output_tokens_details": { "reasoning_tokens": 1000 },
        "total_tokens": 2200
    });
    let read = Usage::from_json(&answer).expect("a usage object");
    assert_eq!(read, usage(1000, 0, 1200));
    // gpt-5.4: 1000 x $2.50 + 1200 x $15, per 1M = 0.0025 + 0.018
    assert_eq!(nanos(builtin_cost("gpt-5.4", &read, STD)), 20_500_000);
}

#[test]
fn chat_and_embedding_usage_shapes_are_read() {
    let chat = serde_json::json!({
        "prompt_tokens": 500, "completion_tokens": 20,
        "prompt_tokens_details": { "cached_tokens": 256 }
    });
    assert_eq!(Usage::from_json(&chat), Some(usage(500, 256, 20)));
    let embedding = serde_json::json!({ "prompt_tokens": 8, "total_tokens": 8 });
    assert_eq!(Usage::from_json(&embedding), Some(usage(8, 0, 0)));
    assert_eq!(Usage::from_json(&serde_json::json!({ "total_tokens": 8 })), None);
    // text-embedding-3-small: 1M tokens x $0.02
    assert_eq!(nanos(builtin_cost("text-embedding-3-small", &usage(1_000_000, 0, 0), STD)), 20_000_000);
}

#[test]
fn cache_writes_are_billed_at_their_own_rate() {
    let answer = serde_json::json!({
        "input_tokens": 10_000,
        "input_tokens_details": { "cached_tokens": 0, "cache_write_tokens": 4_000 },
        "output_tokens": 0
    });
    let read = Usage::from_json(&answer).expect("a usage object");
    assert_eq!(read.cache_write, 4_000);
    // gpt-5.6-sol: 6000 fresh x $5 + 4000 written x $6.25, per 1M = 0.03 + 0.025
    assert_eq!(nanos(builtin_cost("gpt-5.6-sol", &read, STD)), 55_000_000);
}

#[test]
fn flex_and_priority_apply_their_multipliers() {
    let used = usage(10_000, 8_000, 1_000); // $0.044 at standard on gpt-5.5
    assert_eq!(nanos(builtin_cost("gpt-5.5", &used, ServiceTier::Flex)), 22_000_000);
    assert_eq!(nanos(builtin_cost("gpt-5.5", &used, ServiceTier::Priority)), 110_000_000);
    let fast = ServiceTier::from_response(Some("fast"));
    assert_eq!(nanos(builtin_cost("gpt-5.5", &used, fast)), 110_000_000);
}

#[test]
fn a_tier_given_as_rates_uses_them() {
    let table = only(
        "[prices.small]\ninput = 0.15\ncached_input = 0.075\noutput = 0.6\n\
         priority = { input = 0.25, cached_input = 0.125, output = 1.0 }\n",
    );
    // 1000 x $0.25 + 1000 x $1, per 1M
    assert_eq!(nanos(table.cost("small", &at(usage(1000, 0, 1000), ServiceTier::Priority), DAY)), 1_250_000);
    assert_eq!(nanos(table.cost("small", &at(usage(1000, 0, 1000), STD), DAY)), 750_000);
}

#[test]
fn a_tier_the_model_has_no_price_for_is_unpriced() {
    let used = usage(1000, 0, 1000);
    assert_eq!(builtin_cost("gpt-5.4-nano", &used, ServiceTier::Flex), Cost::Unpriced(Unpriced::Tier));
    assert_eq!(builtin_cost("gpt-5.4", &used, ServiceTier::Ultrafast), Cost::Unpriced(Unpriced::Tier));
    let scale = ServiceTier::from_response(Some("scale"));
    assert_eq!(builtin_cost("gpt-5.5", &used, scale), Cost::Unpriced(Unpriced::Tier));
    // 3x of $0.012 until 2027-02-28.
    assert_eq!(nanos(builtin_cost("gpt-6.1-sol", &used, ServiceTier::Ultrafast)), 36_000_000);
}

#[test]
fn service_tier_names_are_read_as_the_provider_writes_them() {
    let read = |s| ServiceTier::from_response(s);
    assert_eq!(read(None), ServiceTier::Standard);
    assert_eq!(read(Some("default")), ServiceTier::Standard);
    assert_eq!(read(Some("auto")), ServiceTier::Standard);
    assert_eq!(read(Some("Flex")), ServiceTier::Flex);
    assert_eq!(read(Some("priority")), ServiceTier::Priority);
    assert_eq!(read(Some("ultrafast")), ServiceTier::Ultrafast);
    assert_eq!(read(Some("scale")), ServiceTier::Other);
}

#[test]
fn past_the_long_context_line_the_whole_request_costs_more() {
    // gpt-5.5 long: 100k fresh x $10 + 200k cached x $1 + 10k out x $45, per 1M = 1.0 + 0.2 + 0.45
    let long = usage(300_000, 200_000, 10_000);
    assert_eq!(nanos(builtin_cost("gpt-5.5", &long, STD)), 1_650_000_000);
    assert_eq!(nanos(builtin_cost("gpt-5.5", &long, ServiceTier::Flex)), 825_000_000);
    // The line is "more than 272K input tokens".
    assert_eq!(nanos(builtin_cost("gpt-5.5", &usage(272_000, 0, 0), STD)), 1_360_000_000);
    assert_eq!(nanos(builtin_cost("gpt-5.5", &usage(272_001, 0, 0), STD)), 2_720_010_000);
    // A model without long-context pricing stays at its rates.
    assert_eq!(nanos(builtin_cost("gpt-5.4-mini", &usage(300_000, 0, 0), STD)), 225_000_000);
}

#[test]
fn one_rounding_half_up_to_the_nano_dollar() {
    // $0.000001 per 1M tokens is one pico-dollar a token.
    let table = only("[prices.tiny]\ninput = 0.000001\noutput = 0\n");
    assert_eq!(table.cost("tiny", &at(usage(499, 0, 0), STD), DAY), Cost::Priced(Usd::ZERO));
    assert_eq!(nanos(table.cost("tiny", &at(usage(500, 0, 0), STD), DAY)), 1);
    assert_eq!(nanos(table.cost("tiny", &at(usage(1_499, 0, 0), STD), DAY)), 1);
    // gpt-5-nano cached: 3 tokens x $0.005/1M = 15 nano-dollars, exactly.
    assert_eq!(nanos(builtin_cost("gpt-5-nano", &usage(3, 3, 0), STD)), 15);
}

#[test]
fn impossible_counts_are_clamped_and_huge_ones_saturate() {
    // More cached tokens than input: all of the input is cached, none is negative.
    assert_eq!(nanos(builtin_cost("gpt-5.5", &usage(1000, 5000, 0), STD)), 500_000);
    let huge = Usage { input: u64::MAX, output: u64::MAX, ..Usage::default() };
    assert_eq!(nanos(builtin_cost("gpt-5.5-pro", &huge, STD)), u64::MAX);
}

#[test]
fn a_user_alias_is_priced_like_its_target_and_follows_its_override() {
    let table = builtin_with("[prices.\"my-azure-deployment\"]\nalias = \"gpt-5.5\"\n");
    let used = usage(10_000, 8_000, 1_000);
    assert_eq!(nanos(table.cost("My-Azure-Deployment", &at(used, STD), DAY)), 44_000_000);
    assert_eq!(table.resolve("my-azure-deployment").map(|r| r.name), Some("gpt-5.5"));
    let overridden =
        builtin_with("[prices.\"gpt-5.5\"]\ninput = 1.0\noutput = 2.0\n[prices.mine]\nalias = \"gpt-5.5\"\n");
    assert_eq!(nanos(overridden.cost("mine", &at(usage(1_000_000, 0, 1_000_000), STD), DAY)), 3_000_000_000);
    let dated_target = builtin_with("[prices.mine]\nalias = \"gpt-4o-2024-08-06\"\n");
    assert_eq!(dated_target.resolve("mine").map(|r| r.name), Some("gpt-4o"));
}

#[test]
fn dated_names_fall_back_to_their_family() {
    let table = PriceTable::builtin();
    assert_eq!(table.resolve("gpt-5.5-2026-03-05").map(|r| r.name), Some("gpt-5.5"));
    assert_eq!(table.resolve("gpt-4o-2024-08-06").map(|r| r.name), Some("gpt-4o"));
    assert_eq!(table.resolve(" GPT-4.1-2025-04-14 ").map(|r| r.name), Some("gpt-4.1"));
    // An exact dated entry wins over the family: the first GPT-4o snapshot kept its launch price.
    assert_eq!(table.resolve("gpt-4o-2024-05-13").map(|r| r.name), Some("gpt-4o-2024-05-13"));
    assert_eq!(nanos(table.cost("gpt-4o-2024-05-13", &at(usage(1_000_000, 0, 0), STD), DAY)), 5_000_000_000);
    // Not a date: no fallback.
    assert!(table.resolve("gpt-5.5-2026-3-05").is_none());
    assert!(table.resolve("gpt-5.5-turbo").is_none());
    assert!(table.resolve("-2026-03-05").is_none());
}

#[test]
fn an_unknown_model_is_unpriced_never_free() {
    let cost = builtin_cost("gpt-9-ultra", &usage(1000, 0, 1000), STD);
    assert_eq!(cost, Cost::Unpriced(Unpriced::Model));
    assert_eq!(cost.priced(), None);
    assert!(PriceTable::builtin().resolve("").is_none());
}

#[test]
fn a_user_override_replaces_the_table_entry_whole() {
    let table = builtin_with("[prices.\"gpt-5.5\"]\ninput = 1.0\ncached_input = 0.1\noutput = 2.0\n");
    // 1M in (half cached) + 1M out: 0.5 x $1 + 0.5 x $0.10 + 1 x $2
    assert_eq!(nanos(table.cost("gpt-5.5", &at(usage(1_000_000, 500_000, 1_000_000), STD), DAY)), 2_550_000_000);
    // The user's entry names no flex price, so the table's is gone with the rest.
    assert_eq!(table.cost("gpt-5.5", &at(usage(1, 0, 1), ServiceTier::Flex), DAY), Cost::Unpriced(Unpriced::Tier));
    // Other models keep the table's prices, and a new model can be added.
    assert_eq!(nanos(table.cost("gpt-5.4", &at(usage(100_000, 0, 0), STD), DAY)), 250_000_000);
    let added = builtin_with("[prices.\"local-llm\"]\ninput = 0\noutput = 0\n");
    assert_eq!(added.cost("local-llm", &at(usage(5, 0, 5), STD), DAY), Cost::Priced(Usd::ZERO));
}

fn assert_error(text: &str, model: &str, field: Option<&str>, problem: &Problem, line: usize) {
    let err = error(text);
    assert_eq!((err.model(), err.field(), err.problem()), (model, field, problem), "{err}");
    assert_eq!(err.line_col(text).map(|(l, _)| l), Some(line), "{err}");
    assert!(err.to_string().contains(model), "the message names the model: {err}");
}

#[test]
fn a_negative_or_non_numeric_price_names_the_model_field_and_line() {
    let text = "[prices.\"gpt-5.5\"]\ninput = -1.0\noutput = 2.0\n";
    assert_error(text, "gpt-5.5", Some("input"), &Problem::Negative, 2);
    let err = error(text);
    assert_eq!(err.line_col(text), Some((2, 9)));
    assert!(err.to_string().starts_with("prices.\"gpt-5.5\".input is negative"), "{err}");
    let quoted = "[prices.m]\ninput = 1.0\noutput = \"30\"\n";
    assert_error(quoted, "m", Some("output"), &Problem::NotANumber { found: "a string" }, 3);
    assert!(error(quoted).to_string().contains("without quotes"));
    assert_error(
        "[prices.m]\ninput = nan\noutput = 1\n",
        "m",
        Some("input"),
        &Problem::NotANumber { found: "not a number" },
        2,
    );
}

#[test]
fn precision_size_and_missing_prices_are_refused() {
    assert_error(
        "[prices.m]\ninput = 0.0000001\noutput = 1\n",
        "m",
        Some("input"),
        &Problem::TooPrecise { places: 6 },
        2,
    );
    assert_error("[prices.m]\ninput = 2000000.0\noutput = 1\n", "m", Some("input"), &Problem::TooLarge, 2);
    assert_error("[prices.m]\ninput = inf\noutput = 1\n", "m", Some("input"), &Problem::TooLarge, 2);
    assert_error("[prices.m]\ninput = 1.0\n", "m", Some("output"), &Problem::Missing, 1);
    assert_error("[prices.m]\ninptu = 1.0\ninput = 1\noutput = 1\n", "m", Some("inptu"), &Problem::UnknownField, 2);
    assert_error("[prices]\nm = 5\n", "m", None, &Problem::NotATable { found: "a number" }, 2);
    assert_error("[prices]\n\" \" = { alias = \"gpt-5.5\" }\n", " ", None, &Problem::EmptyName, 2);
}

#[test]
fn bad_tiers_and_long_context_rules_are_refused() {
    let base = "[prices.m]\ninput = 1\noutput = 1\n";
    let tier = |line: &str| format!("{base}{line}\n");
    assert_error(&tier("flex = \"half\""), "m", Some("flex"), &Problem::BadTier { found: "a string" }, 4);
    assert_error(&tier("flex = 0"), "m", Some("flex"), &Problem::BadTier { found: "zero" }, 4);
    assert_error(&tier("flex = 0.0005"), "m", Some("flex"), &Problem::TooPrecise { places: 3 }, 4);
    assert_error(&tier("priority = 500"), "m", Some("priority"), &Problem::TooLarge, 4);
    let no_output = Problem::BadTier { found: "a table without input or output" };
    assert_error(&tier("priority = { input = 2 }"), "m", Some("priority"), &no_output, 4);
    let long = "long_context = { above = 272000, input = 2 }";
    assert_error(&tier(long), "m", Some("long_context"), &Problem::BadLongContext, 4);
    let negative = "long_context = { above = -1, input = 2, cached_input = 2, output = 1.5 }";
    assert_error(&tier(negative), "m", Some("long_context"), &Problem::BadLongContext, 4);
    assert_error(&tier("checked = \"Dec 1\""), "m", Some("checked"), &Problem::BadDate, 4);
    assert_error(&tier("source = 5"), "m", Some("source"), &Problem::NotAString { found: "a number" }, 4);
}

#[test]
fn alias_mistakes_name_the_alias_and_the_fix() {
    let unknown = "[prices.azure]\nalias = \"gpt-9\"\n";
    let to_unknown = Problem::AliasToUnknown { target: "gpt-9".into() };
    let err = PriceTable::builtin().with_overrides(&overrides(unknown)).expect_err("gpt-9 has no price");
    assert_eq!((err.model(), err.field(), err.problem()), ("azure", Some("alias"), &to_unknown));
    assert_eq!(err.line_col(unknown), Some((2, 9)), "at the alias's target, not the table's header");
    assert!(err.to_string().contains("give this entry its own input and output"), "{err}");
    let both = "[prices.azure]\nalias = \"gpt-5.5\"\ninput = 5.0\n";
    assert_error(both, "azure", Some("input"), &Problem::AliasWithPrices, 3);
    let chain = "[prices.a]\nalias = \"b\"\n[prices.b]\nalias = \"c\"\n[prices.c]\ninput = 1\noutput = 1\n";
    let err = error(chain);
    assert_eq!((err.model(), err.problem()), ("a", &Problem::AliasToAlias { target: "b".into() }));
    assert_error("[prices.a]\nalias = 5\n", "a", Some("alias"), &Problem::NotAString { found: "a number" }, 2);
}

#[test]
fn the_same_model_twice_is_refused() {
    let text = "[prices.\"gpt-5.5\"]\ninput = 1\noutput = 1\n[prices.\"GPT-5.5\"]\ninput = 2\noutput = 2\n";
    let err = error(text);
    assert!(matches!(err.problem(), Problem::Duplicate { .. }), "{err}");
    assert!(err.to_string().contains("keep one entry"), "{err}");
    // The exact same name twice is already a TOML error, with its line.
    let twice = "[prices.m]\ninput = 1\noutput = 1\n[prices.m]\ninput = 2\noutput = 2\n";
    let toml_err = toml::from_str::<ConfigWithPrices>(twice).err().expect("TOML refuses a duplicate table");
    assert!(toml_err.message().contains("duplicate"), "{toml_err}");
}

#[test]
fn a_table_without_spans_gives_the_same_errors_without_lines() {
    let table: toml::Table = toml::from_str("m = { input = -1, output = 1 }").expect("TOML");
    let err = empty().with_overrides(&PriceOverrides::from_table(&table)).expect_err("negative");
    assert_eq!((err.model(), err.field(), err.problem()), ("m", Some("input"), &Problem::Negative));
    assert_eq!(err.line_col("m = { input = -1, output = 1 }"), None);
    let ok: toml::Table = toml::from_str("m = { alias = \"gpt-5.5\" }").expect("TOML");
    let priced = PriceTable::builtin().with_overrides(&PriceOverrides::from_table(&ok)).expect("valid");
    assert_eq!(priced.resolve("m").map(|r| r.name), Some("gpt-5.5"));
}

#[test]
fn overrides_write_back_as_they_were_written() {
    let text = "[prices.azure]\nalias = \"gpt-5.5\"\n[prices.m]\ninput = 1.5\noutput = 3.0\nflex = 0.5\n";
    let written = toml::to_string(&ConfigOut { prices: overrides(text) }).expect("serializes");
    assert_eq!(builtin_with(&written), builtin_with(text));
    assert!(written.contains("[prices.azure]"), "{written}");
}

#[derive(serde::Serialize)]
struct ConfigOut {
    prices: PriceOverrides,
}

#[test]
fn every_embedded_entry_parses_with_a_source_and_a_date() {
    let table = PriceTable::parse_embedded(include_str!("prices.toml")).expect("prices.toml is valid");
    let mut count = 0;
    for (name, price) in table.priced() {
        count += 1;
        let source = price.source.as_deref().unwrap_or_default();
        assert!(source.starts_with("https://"), "{name}: source {source:?}");
        assert!(price.checked.as_deref().is_some_and(|d| d.starts_with("20")), "{name}: no checked date");
        let std = price.standard;
        assert!(std.input > 0 || name.starts_with("text-embedding"), "{name}: free input");
        assert!(std.cached_input.is_none_or(|c| c <= std.input), "{name}: cached above input");
        assert!(std.cache_write.is_none_or(|w| w >= std.input), "{name}: cache write below input");
    }
    assert_eq!(count, PriceTable::builtin().priced().count());
    let required = [
        "gpt-6.2-sol",
        "gpt-5.5",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "gpt-5.5-pro",
        "gpt-5.4-pro",
        "gpt-5.3-codex",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "o3",
        "o4-mini",
        "o3-pro",
        "o1",
        "gpt-4.1",
        "gpt-4o",
        "gpt-4o-mini",
        "text-embedding-3-small",
        "text-embedding-3-large",
        "text-embedding-ada-002",
    ];
    for model in required {
        assert!(table.resolve(model).is_some(), "{model} is missing from prices.toml");
    }
}

#[test]
fn the_embedded_table_refuses_an_entry_without_provenance() {
    let err = PriceTable::parse_embedded("[prices.m]\ninput = 1\noutput = 1\nchecked = \"2026-12-01\"\n")
        .expect_err("no source");
    assert_eq!((err.field(), err.problem()), (Some("source"), &Problem::Missing));
    let err =
        PriceTable::parse_embedded("[prices.m]\ninput = 1\noutput = 1\nsource = \"https://x\"\n").expect_err("no date");
    assert_eq!((err.field(), err.problem()), (Some("checked"), &Problem::Missing));
    let err = PriceTable::parse_embedded("[prices.m]\ninput = 1\n[other]\n").expect_err("unknown section");
    assert!(matches!(err.problem(), Problem::Syntax { .. }), "{err}");
}

#[test]
fn amounts_print_every_significant_digit() {
    assert_eq!(Usd::from_nanos(1_500_000_000).to_string(), "$1.50");
    assert_eq!(Usd::from_nanos(123).to_string(), "$0.000000123");
    assert_eq!(Usd::ZERO.to_string(), "$0.00");
    assert_eq!(Usd::from_nanos(44_000_000).to_string(), "$0.044");
    let total: Usd = [Usd::from_nanos(u64::MAX), Usd::from_nanos(1)].into_iter().sum();
    assert_eq!(total.nanos(), u64::MAX);
    assert_eq!(Unpriced::Model.label(), "unpriced_model");
}

#[test]
fn the_same_prices_laid_out_differently_are_equal() {
    let plain = overrides("[prices.a]\ninput = 1\noutput = 2\n");
    let moved = overrides("# my prices\n\n[prices.a]\n# cheap\ninput = 1\noutput = 2\n");
    assert_eq!(plain, moved, "comments and blank lines change no price");
    assert_ne!(plain, overrides("[prices.a]\ninput = 1\noutput = 3\n"));
}

#[test]
fn an_amount_to_the_cent_rounds_half_up_and_never_says_zero_for_something() {
    let usd = super::Usd::from_nanos;
    assert_eq!(usd(0).cents(), "$0.00");
    assert_eq!(usd(1).cents(), "<$0.01");
    assert_eq!(usd(4_999_999).cents(), "<$0.01");
    assert_eq!(usd(5_000_000).cents(), "$0.01");
    assert_eq!(usd(1_234_999_999).cents(), "$1.23");
    assert_eq!(usd(1_235_000_000).cents(), "$1.24");
    assert_eq!(usd(120_000_000_000).cents(), "$120.00");
}

#[test]
fn reading_the_text_gives_the_counts_the_tree_gives() {
    let objects = [
        r#"{"input_tokens":1536,"input_tokens_details":{"cached_tokens":1024},"output_tokens":420,"output_tokens_details":{"reasoning_tokens":128},"total_tokens":1956}"#,
        r#"{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0}}"#,
        r#"{"input_tokens":10,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":4},"output_tokens":3}"#,
        r#"{"input_tokens":-1,"output_tokens":2.5,"prompt_tokens":"7","completion_tokens":null}"#,
        r#"{"input_tokens":9,"input_tokens_details":null,"prompt_tokens_details":{"cached_tokens":2}}"#,
        r#"{"input_tokens":9,"input_tokens_details":[1,{"cached_tokens":4}],"output_tokens":{"a":[1]}}"#,
        r#"{"input_tokens":9,"prompt_tokens_details":{"cached_tokens":true,"cache_write_tokens":6}}"#,
        r#"{"in\u0070ut_tokens":8,"output_tokens":18446744073709551615}"#,
        r#"{"total_tokens":8}"#,
        r#"{}"#,
        r#"null"#,
        r#"[1]"#,
        r#"{"input_tokens":1"#,
    ];
    for text in objects {
        let tree = serde_json::from_str::<serde_json::Value>(text).ok().and_then(|v| Usage::from_json(&v));
        assert_eq!(Usage::from_text(text.as_bytes()), tree, "{text}");
    }
    assert_eq!(Usage::from_text(objects[0].as_bytes()), Some(usage(1536, 1024, 420)));
}

/// `usage` with `written` of its input tokens written to the cache, under `retention`.
fn writing(usage: Usage, written: u64, retention: CacheRetention) -> Usage {
    Usage { cache_write: written, retention, ..usage }
}

#[test]
fn cache_writes_are_billed_at_the_rate_of_the_retention_asked_for() {
    // gpt-6.2-sol: 100,000 input of which 20,000 cached and 30,000 written; 2,000 output.
    let used = writing(usage(100_000, 20_000, 2_000), 30_000, CacheRetention::Default);
    // 50,000 x $2 + 20,000 x $0.10 + 30,000 x $2.50 + 2,000 x $10, per 1M
    // = 0.1 + 0.002 + 0.075 + 0.02 = $0.197
    assert_eq!(nanos(builtin_cost("gpt-6.2-sol", &used, STD)), 197_000_000);
    // The 12-hour retention: the 30,000 written at $5.00 instead: 0.1 + 0.002 + 0.15 + 0.02 = $0.272
    let extended = writing(used, 30_000, CacheRetention::Extended);
    assert_eq!(nanos(builtin_cost("gpt-6.2-sol", &extended, STD)), 272_000_000);
    // A model whose page gives no 12-hour rate leaves such a request unpriced, not at the 30-minute rate.
    let astra = builtin_cost("gpt-6.2-astra", &extended, STD);
    assert_eq!(astra, Cost::Unpriced(Unpriced::CacheRetention));
    // The extended retention without a write is priced as usual: 80,000 x $8 + 20,000 x $0.40 + 2,000 x $40.
    let nothing_written = writing(used, 0, CacheRetention::Extended);
    assert_eq!(nanos(builtin_cost("gpt-6.2-astra", &nothing_written, STD)), 728_000_000);
}

#[test]
fn a_request_over_272k_input_tokens_is_billed_at_long_context_rates_whole() {
    // gpt-6.2-sol, 300,000 input (100,000 cached, 20,000 written), 10,000 output: past 272K, input and
    // cache 2x, output 1.5x, for the whole request:
    // 180,000 x $4 + 100,000 x $0.20 + 20,000 x $5 + 10,000 x $15, per 1M = 0.72 + 0.02 + 0.1 + 0.15
    let long = writing(usage(300_000, 100_000, 10_000), 20_000, CacheRetention::Default);
    assert_eq!(nanos(builtin_cost("gpt-6.2-sol", &long, STD)), 990_000_000);
    // At exactly 272,000 it is not long: 152,000 x $2 + 100,000 x $0.10 + 20,000 x $2.50 + 10,000 x $10.
    let at_the_line = writing(usage(272_000, 100_000, 10_000), 20_000, CacheRetention::Default);
    assert_eq!(nanos(builtin_cost("gpt-6.2-sol", &at_the_line, STD)), 464_000_000);
    // Long context and the Fast tier multiply: 2x the long price.
    assert_eq!(nanos(builtin_cost("gpt-6.2-sol", &long, ServiceTier::Priority)), 1_980_000_000);
}

#[test]
fn ultrafast_is_a_tier_of_its_own_whose_multiplier_changes_on_2027_03_01() {
    // gpt-6.2-sol standard: 10,000 x $2 + 1,000 x $10, per 1M = $0.03.
    let used = at(usage(10_000, 0, 1_000), ServiceTier::Ultrafast);
    let table = PriceTable::builtin();
    assert_eq!(nanos(table.cost("gpt-6.2-sol", &at(used, STD), DAY)), 30_000_000);
    assert_eq!(nanos(table.cost("gpt-6.2-sol", &used, DAY)), 90_000_000, "3x today");
    assert_eq!(nanos(table.cost("gpt-6.2-sol", &used, LAST_3X)), 90_000_000, "3x through 2027-02-28");
    assert_eq!(nanos(table.cost("gpt-6.2-sol", &used, FIRST_6X)), 180_000_000, "6x from 2027-03-01");
    // Fast (priority) is 2x, whatever it is called: a tier apart from ultrafast.
    let fast = at(used, ServiceTier::from_response(Some("fast")));
    assert_eq!(nanos(table.cost("gpt-6.2-sol", &fast, DAY)), 60_000_000);
    for model in ["gpt-6.2-astra", "gpt-6-astra", "gpt-6.1-sol"] {
        let standard = nanos(table.cost(model, &at(used, STD), DAY));
        assert_eq!(nanos(table.cost(model, &used, DAY)), 3 * standard, "{model}");
        assert_eq!(nanos(table.cost(model, &used, FIRST_6X)), 6 * standard, "{model}");
    }
    // A model that does not offer ultrafast leaves it unpriced.
    assert_eq!(table.cost("gpt-6-sol", &used, DAY), Cost::Unpriced(Unpriced::Tier));
}

#[test]
fn a_tier_priced_in_steps_applies_each_from_its_day() {
    let table = only(
        "[prices.m]\ninput = 1.0\noutput = 1.0\n\
         ultrafast = [{ from = \"2027-01-01\", price = 2.0 }, { from = 2027-03-01, price = { input = 5.0, output = 5.0 } }]\n",
    );
    let used = at(usage(1_000_000, 0, 0), ServiceTier::Ultrafast);
    assert_eq!(table.cost("m", &used, DAY), Cost::Unpriced(Unpriced::Tier), "before its first step");
    assert_eq!(nanos(table.cost("m", &used, LAST_3X)), 2_000_000_000);
    assert_eq!(nanos(table.cost("m", &used, FIRST_6X)), 5_000_000_000);
    for (steps, why) in [
        ("[{ price = 2.0 }, { price = 3.0 }]", "a later step without a date"),
        ("[{ from = 2027-03-01, price = 2.0 }, { from = 2027-01-01, price = 3.0 }]", "dates going back"),
        ("[{ from = \"2027-02-30\", price = 2.0 }]", "no such day"),
        ("[{ price = 2.0, until = 2027-01-01 }]", "a field steps do not have"),
        ("[]", "no step"),
    ] {
        let e = error(&format!("[prices.m]\ninput = 1.0\noutput = 1.0\nultrafast = {steps}\n"));
        assert!(e.to_string().contains("ultrafast"), "{why}: {e}");
    }
}
