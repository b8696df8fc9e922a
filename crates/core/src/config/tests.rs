use super::*;
use crate::budget::OnLimit;
use crate::spend::Usd;

#[test]
fn a_bad_budget_in_money_names_the_file_the_line_and_the_fix() {
    let key = "[[keys]]\nid = \"k_1\"\nlabel = \"w\"\n";
    let err = Config::parse(&format!("{key}daily_budget_usd = -5\n"), Path::new("/x/c.toml")).expect_err("negative");
    let msg = err.to_string();
    assert!(msg.contains("/x/c.toml") && msg.contains("line 4") && msg.contains("zero or more"), "{msg}");
    let err = Config::parse(&format!("{key}daily_budget_usd = \"five\"\n"), Path::new("c.toml")).expect_err("text");
    assert!(err.to_string().contains("line 4"), "{err}");
    let err = Config::parse(&format!("{key}reserve_at = 120\n"), Path::new("c.toml")).expect_err("120 %");
    assert!(err.to_string().contains("percent from 1 to 100"), "{err}");
    let err = Config::parse(&format!("{key}reserve_window_pct = 95\n"), Path::new("/x/c.toml")).expect_err("95 %");
    assert!(err.to_string().contains("/x/c.toml") && err.to_string().contains("1 to 90"), "{err}");
    let ok = Config::parse(&format!("{key}monthly_budget_usd = 40\non_limit = \"stop\"\n"), Path::new("c.toml"));
    let money = ok.expect("a whole number of dollars reads").keys[0].money;
    assert_eq!((money.monthly, money.on_limit), (Some(Usd::from_nanos(40_000_000_000)), OnLimit::Stop));
}

#[test]
fn unknown_fields_are_named_with_the_file() {
    let err = Config::parse("listen = \"127.0.0.1:1\"\nlisten_port = 3\n", Path::new("/x/c.toml"))
        .expect_err("unknown field");
    let msg = err.to_string();
    assert!(msg.contains("listen_port"), "{msg}");
    assert!(msg.contains("/x/c.toml"), "{msg}");

    let err = Config::parse("[[keys]]\nid = \"k_1\"\nlabel = \"w\"\nsecret = \"sk-x\"\n", Path::new("c.toml"))
        .expect_err("secrets are not a config field");
    assert!(err.to_string().contains("secret"), "{err}");
}

#[test]
fn round_trips_through_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sub/config.toml");
    let mut config = Config::default();
    config.keys.push(KeyConfig {
        id: KeyId::new("k_1"),
        label: "work".into(),
        provider: ProviderId::Azure,
        base_url: Some("https://r.openai.azure.com/openai/v1".into()),
        org: Some("org-1".into()),
        disabled: true,
        imported: true,
        settings: KeySettings {
            priority: 1,
            daily_token_budget: Some(1_000_000),
            models: vec!["gpt-5.5".into()],
            exclude_models: Vec::new(),
            reserve_window_pct: Some(25),
        },
        money: MoneyBudget {
            daily: Some(Usd::from_nanos(5_000_000_000)),
            monthly: None,
            reserve_at: Some(80),
            on_limit: OnLimit::Stop,
        },
    });
    config.save(&path).expect("save");
    assert_eq!(Config::load(&path).expect("load"), config);
    assert!(Config::load(&dir.path().join("missing.toml")).is_ok());
}

#[test]
fn the_reference_example_is_a_valid_config() {
    let readme = include_str!("../../../../docs/src/reference/configuration.md");
    let start =
        readme.find("```toml\nlisten").expect("the configuration reference has the config example") + "```toml\n".len();
    let end = start + readme[start..].find("```").expect("closed");
    let config = Config::parse(&readme[start..end], Path::new("configuration.md")).expect("the example parses");
    assert_eq!(config.keys[0].label, "work");
    assert_eq!(config.affinity.table_capacity, 50_000);
    assert_eq!(config.tokens[0].name, "codex");
}

#[test]
fn pool_mistakes_name_the_file_the_line_and_the_fix() {
    let keys = "[[keys]]\nid = \"k_1\"\nlabel = \"work\"\n\n";
    let cases = [
        ("[[pools]]\nname = \"work\"\nkeys = [\"work\", \"wrok\"]\n", "line 7, column 17", "'wrok'"),
        ("[[pools]]\nname = \"a\"\n[[pools]]\nname = \"A\"\n", "line 8, column 8", "two pools"),
        (
            "[[pools]]\nname = \"a\"\nfallback = [\"b\"]\n[[pools]]\nname = \"b\"\nfallback = [\"a\"]\n",
            "line 7",
            "lead back",
        ),
        (
            "[[tokens]]\nid = \"t_1\"\nname = \"codex\"\npool = \"play\"\n",
            "line 8, column 8",
            "keymux pool create play",
        ),
    ];
    for (text, at, words) in cases {
        let err = Config::parse(&format!("{keys}{text}"), Path::new("/x/c.toml")).expect_err(text).to_string();
        assert!(err.contains("/x/c.toml") && err.contains(at) && err.contains(words), "{err}");
    }
    let err = Config::parse("listen = \"127.0.0.1:1\"\n\nmax_attempts = \"two\"\n", Path::new("c.toml"))
        .expect_err("wrong type");
    assert!(err.to_string().contains("line 3"), "{err}");
    let fine = format!(
        "{keys}[[pools]]\nname = \"work\"\nkeys = [\"work\"]\n[[tokens]]\nid = \"t\"\nname = \"n\"\npool = \"work\"\n"
    );
    let config = Config::parse(&fine, Path::new("c.toml")).expect("valid");
    assert_eq!((config.pools[0].name.as_str(), config.tokens[0].pool.as_str()), ("work", "work"));
    let config = Config::parse("[[tokens]]\nid = \"t\"\nname = \"n\"\n", Path::new("c.toml")).expect("valid");
    assert_eq!(config.tokens[0].pool, "all", "a token without a pool reaches every key, as before");
}

#[test]
fn price_mistakes_name_the_file_the_line_and_the_fix() {
    let cases = [
        ("[prices.\"gpt-5.5\"]\ninput = -1.0\noutput = 30.0\n", "line 3, column 9", "is negative"),
        ("\n[prices.\"gpt-5.5\"]\ninput = \"five\"\noutput = 30.0\n", "line 4, column 9", "without quotes"),
        ("[prices.\"my-azure\"]\nalias = \"gpt-9-nope\"\n", "line 3, column 9", "has no price"),
        (
            "[prices.\"gpt-5.5\"]\nalias = \"gpt-5.4\"\n[prices.\"GPT-5.5 \"]\nalias = \"gpt-5.4\"\n",
            "line 4, column 1",
            "prices.\"GPT-5.5 \" is priced twice",
        ),
    ];
    for (prices, at, words) in cases {
        let text = format!("listen = \"127.0.0.1:1\"\n{prices}");
        let err = Config::parse(&text, Path::new("/x/c.toml")).expect_err(prices).to_string();
        assert!(err.contains("/x/c.toml") && err.contains(at) && err.contains(words), "{err}");
    }
    let fine = "[prices.\"my-azure\"]\nalias = \"gpt-5.5\"\n[prices.\"gpt-5.5\"]\ninput = 1\noutput = 2.5\n";
    let config = Config::parse(fine, Path::new("c.toml")).expect("valid prices");
    let table = config.price_table().expect("valid prices");
    assert_eq!(table.resolve("my-azure").map(|r| r.name), Some("gpt-5.5"));
    assert_eq!(table.resolve("gpt-5.5").map(|r| r.price.standard.output), Some(2_500_000));
}

#[test]
fn duplicate_labels_are_rejected() {
    let text = "[[keys]]\nid=\"k_1\"\nlabel=\"w\"\n[[keys]]\nid=\"k_2\"\nlabel=\"W\"\n";
    assert!(Config::parse(text, Path::new("c.toml")).is_err());
}

#[test]
fn env_keys_and_attributes() {
    let vars = [
        ("KEYMUX_KEY_WORK", "sk-w"),
        ("KEYMUX_KEY_WORK_ORG", "org-1"),
        ("KEYMUX_KEY_AZ", "abc"),
        ("KEYMUX_KEY_AZ_PROVIDER", "azure"),
        ("KEYMUX_KEY_AZ_BASE_URL", "https://r.openai.azure.com/openai/v1"),
        ("KEYMUX_CLIENT_TOKEN", "km-test-local-token-4d2c7a91e0b35f68"),
        ("PATH", "/bin"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    let env = EnvSecrets::from_vars(vars).expect("valid");
    assert_eq!(env.keys.len(), 2);
    let work = env.keys.iter().find(|k| k.label == "work").expect("work");
    assert_eq!(work.org.as_deref(), Some("org-1"));
    assert_eq!(work.provider, ProviderId::Openai);
    let az = env.keys.iter().find(|k| k.label == "az").expect("az");
    assert_eq!(az.provider, ProviderId::Azure);
    assert!(az.base_url.is_some());
    assert!(env.client_token.is_some());
}

#[test]
fn a_weak_client_token_is_refused() {
    let vars = [("KEYMUX_CLIENT_TOKEN".to_owned(), "x".to_owned())];
    let err = EnvSecrets::from_vars(vars).expect_err("too short");
    assert!(err.contains("KEYMUX_CLIENT_TOKEN") && err.contains("at least"), "{err}");
}

#[test]
fn bad_env_key_is_reported_without_the_value() {
    let vars = [("KEYMUX_KEY_WORK".to_owned(), "sk-w x".to_owned())];
    let err = EnvSecrets::from_vars(vars).expect_err("space in key");
    assert!(err.contains("KEYMUX_KEY_WORK"));
    assert!(!err.contains("sk-w x"));
}

#[test]
fn env_pools_take_their_policies_from_their_attributes() {
    let vars = [
        ("KEYMUX_POOL_WORK", "a,b"),
        ("KEYMUX_POOL_WORK_ALLOW_PRIORITY", "false"),
        ("KEYMUX_POOL_WORK_PROXY", "http://proxy.example:3128/"),
        ("KEYMUX_POOL_HOME", "c"),
        ("KEYMUX_POOL_HOME_ALLOW_ULTRAFAST", "no"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    let env = EnvSecrets::from_vars(vars).expect("valid");
    assert_eq!(env.pools.len(), 2, "the attributes are not pools of their own: {:?}", env.pools);
    let work = env.pools.iter().find(|p| p.name == "work").expect("work");
    assert_eq!(
        (work.policies.allow_priority, work.policies.proxy.as_deref()),
        (false, Some("http://proxy.example:3128"))
    );
    let home = env.pools.iter().find(|p| p.name == "home").expect("home");
    assert_eq!((home.policies.allow_priority, home.policies.proxy.as_deref()), (true, None));
    assert_eq!((home.policies.allow_ultrafast, work.policies.allow_ultrafast), (false, true));
    let bad = |name: &str, value: &str| {
        let vars = [("KEYMUX_POOL_WORK", "a"), (name, value)].map(|(a, b)| (a.to_owned(), b.to_owned()));
        EnvSecrets::from_vars(vars).expect_err("refused")
    };
    assert!(bad("KEYMUX_POOL_WORK_ALLOW_PRIORITY", "maybe").contains("true or false"));
    assert!(bad("KEYMUX_POOL_WORK_ALLOW_ULTRAFAST", "sometimes").starts_with("KEYMUX_POOL_WORK_ALLOW_ULTRAFAST"));
    let err = bad("KEYMUX_POOL_WORK_PROXY", "ftp://bob:hunter2@proxy.example:21");
    assert!(err.starts_with("KEYMUX_POOL_WORK_PROXY") && !err.contains("hunter2") && !err.contains("bob"), "{err}");
    // A user and password stay in memory, apart from the pool.
    let vars = [("KEYMUX_POOL_WORK", "a"), ("KEYMUX_POOL_WORK_PROXY", "http://bob:hunter2@proxy.example:3128")]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
    let env = EnvSecrets::from_vars(vars).expect("valid");
    assert_eq!(env.pools[0].policies.proxy.as_deref(), Some("http://proxy.example:3128"));
    assert!(env.pools[0].proxy_login);
    assert_eq!(
        env.proxy_logins.iter().map(|(p, s)| (p.as_str(), s.expose())).collect::<Vec<_>>(),
        [("work", "bob:hunter2")]
    );
    assert!(!format!("{env:?}").contains("hunter2"), "debug output shows no password");
}

#[test]
fn pool_policies_are_read_from_the_config_file_with_their_defaults() {
    let text = "[[keys]]\nid = \"k_1\"\nlabel = \"w\"\n\n[[pools]]\nname = \"work\"\nkeys = [\"w\"]\nallow_priority = \
                false\nproxy = \"http://127.0.0.1:3128\"\n\n[[pools]]\nname = \"home\"\nkeys = [\"w\"]\nproxy = \
                \"http://127.0.0.1:3128\"\n";
    let config = Config::parse(text, std::path::Path::new("c.toml")).expect("valid");
    assert_eq!((config.pools[0].policies.allow_priority, config.pools[1].policies.allow_priority), (false, true));
    assert_eq!(config.pools[0].policies.proxy.as_deref(), Some("http://127.0.0.1:3128"));
}

#[test]
fn the_config_file_leaves_out_the_settings_at_their_default_only() {
    use super::defaults::drop_defaults;
    use crate::budget::MoneyBudget;
    let text = "id = \"k\"\npriority = 0\nmodels = []\nexclude_models = [\"m\"]\nreserve_at = 80\n\
                on_limit = \"reserve\"\ndaily_budget_usd = 0\n";
    let mut doc: toml_edit::DocumentMut = text.parse().expect("toml");
    drop_defaults(doc.as_table_mut());
    let left: Vec<&str> = doc.iter().map(|(k, _)| k).collect();
    assert_eq!(left, ["id", "exclude_models", "reserve_at", "daily_budget_usd"], "{doc}");
    let money: MoneyBudget = toml::from_str(&doc.to_string()).expect("reads back");
    assert_eq!((money.reserve_at, money.on_limit), (Some(80), OnLimit::Reserve));
    for (written, kept) in [("allow_priority = true\n", false), ("allow_priority = false\n", true)] {
        let mut pool: toml_edit::DocumentMut = format!("name = \"work\"\n{written}").parse().expect("toml");
        drop_defaults(pool.as_table_mut());
        assert_eq!(pool.contains_key("allow_priority"), kept, "{written}");
    }
}
