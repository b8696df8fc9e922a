use super::*;
use crate::digest::OrgTag;

fn pool(name: &str, keys: &[&str], fallback: &[&str]) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        fallback: fallback.iter().map(|f| (*f).to_owned()).collect(),
        ..PoolConfig::default()
    }
}

fn known(name: &str) -> bool {
    ["work", "work-2", "personal", "k_w1"].contains(&name)
}

fn keys() -> Vec<(KeyId, String)> {
    [("k_w1", "work"), ("k_w2", "work-2"), ("k_p1", "personal")]
        .iter()
        .map(|(id, label)| (KeyId::new(*id), (*label).to_owned()))
        .collect()
}

fn ids(names: &[&str]) -> Vec<KeyId> {
    names.iter().map(|n| KeyId::new(*n)).collect()
}

#[test]
fn bad_pools_are_refused_with_their_place() {
    let none: [&str; 0] = [];
    type Case = (&'static str, Vec<PoolConfig>, Vec<&'static str>, Place, &'static str);
    let cases: Vec<Case> = vec![
        ("unknown key", vec![pool("work", &["work", "nope"], &[])], vec![], Place::Key(0, 1), "'nope'"),
        ("duplicate name", vec![pool("work", &[], &[]), pool("Work", &[], &[])], vec![], Place::Name(1), "two pools"),
        ("all is built in", vec![pool("all", &[], &[])], vec![], Place::Name(0), "built in"),
        ("bad name", vec![pool("w rk", &[], &[])], vec![], Place::Name(0), "pool name"),
        ("itself", vec![pool("work", &[], &["work"])], vec![], Place::Fallback(0, 0), "itself"),
        ("unknown fallback", vec![pool("work", &[], &["play"])], vec![], Place::Fallback(0, 0), "no pool named 'play'"),
        (
            "cycle",
            vec![pool("a", &[], &["b"]), pool("b", &[], &["c"]), pool("c", &[], &["a"])],
            vec![],
            Place::Fallback(0, 0),
            "lead back",
        ),
        ("token pool", vec![pool("work", &[], &[])], vec!["all", "work", "play"], Place::Token(2), "'play'"),
    ];
    for (name, pools, tokens, place, words) in cases {
        let problem = validate(&pools, known, tokens.iter().copied()).expect_err(name);
        assert_eq!(problem.place, place, "{name}");
        assert!(problem.message.contains(words), "{name}: {}", problem.message);
    }
    let fine = [pool("work", &["work", "K_W1"], &["personal"]), pool("personal", &[], &["all"])];
    let lenient = |name: &str| known(&name.to_ascii_lowercase());
    assert_eq!(validate(&fine, lenient, ["work", "all", "personal"]), Ok(()));
    assert_eq!(validate(&[], known, none), Ok(()));
}

#[test]
fn a_pool_reaches_its_keys_then_its_fallbacks_in_order() {
    let defs = vec![pool("work", &["work", "k_w2"], &["personal", "all"]), pool("personal", &["personal"], &[])];
    let pools = Pools::resolve(defs, &keys(), &Pools::default());
    let reach = pools.reach("WORK");
    let tiers: Vec<(&str, Vec<KeyId>)> = reach.tiers().iter().map(|t| (t.pool, t.keys.to_vec())).collect();
    assert_eq!(
        tiers,
        vec![("work", ids(&["k_w1", "k_w2"])), ("personal", ids(&["k_p1"])), ("all", ids(&["k_w1", "k_w2", "k_p1"])),]
    );
    assert!(pools.reach("all").tiers().is_empty(), "all is the whole pool, undivided");
    assert_eq!(pools.pools_of(&KeyId::new("k_w2")), vec!["work".to_owned()]);
}

#[test]
fn a_missing_pool_reaches_no_key_rather_than_every_key() {
    let pools = Pools::resolve(vec![pool("work", &["work"], &[])], &keys(), &Pools::default());
    let reach = pools.reach("gone");
    assert_eq!(reach.pool(), "gone");
    assert_eq!(reach.tiers().len(), 1);
    assert!(reach.tiers()[0].keys.is_empty());
}

#[test]
fn state_from_another_pool_is_a_mismatch_and_names_its_pool() {
    let defs = vec![pool("work", &["work"], &[]), pool("personal", &["personal"], &[])];
    let pools = Pools::resolve(defs, &keys(), &Pools::default());
    let exists = |_: &KeyId| true;
    let work = pools.reach("work");
    assert_eq!(work.mismatch(&ids(&["k_w1"]), exists), None);
    assert_eq!(work.mismatch(&ids(&["k_w1", "k_p1"]), exists), Some((KeyId::new("k_p1"), "personal".to_owned())));
    assert_eq!(work.mismatch(&ids(&["k_w2"]), exists), Some((KeyId::new("k_w2"), "all".to_owned())), "in no user pool");
    assert_eq!(work.mismatch(&ids(&["k_p1"]), |_| false), None, "a key that no longer exists follows lost_org");
    assert_eq!(pools.reach("all").mismatch(&ids(&["k_p1"]), exists), None, "all reaches every key");
}

#[test]
fn a_key_taken_out_of_a_pool_is_not_a_mismatch_until_it_comes_back() {
    let before = Pools::resolve(vec![pool("work", &["work", "work-2"], &[])], &keys(), &Pools::default());
    let after = Pools::resolve(vec![pool("work", &["work"], &[])], &keys(), &before);
    let exists = |_: &KeyId| true;
    assert_eq!(after.reach("work").mismatch(&ids(&["k_w2"]), exists), None, "taken out mid-session: lost_org rules");
    assert_eq!(after.keys_of("work"), &ids(&["k_w1"])[..], "but it is not reached");
    let back = Pools::resolve(vec![pool("work", &["work", "work-2"], &[])], &keys(), &after);
    let again = Pools::resolve(vec![pool("work", &["work"], &[])], &keys(), &back);
    assert_eq!(again.reach("work").mismatch(&ids(&["k_w2"]), exists), None);
    let other = Pools::resolve(vec![pool("play", &["work"], &[])], &keys(), &before);
    assert!(other.reach("play").mismatch(&ids(&["k_w2"]), exists).is_some(), "former keys are per pool");
}

#[test]
fn a_bare_response_id_reaches_only_keys_whose_organization_is_their_pools_alone() {
    let org = |c: u8| Some(OrgTag([c; crate::digest::ORG_TAG_LEN]));
    // work: w1 (org a), w2 (org b); personal: p1 (org b). Organization b is shared.
    let defs = vec![pool("work", &["work", "work-2"], &[]), pool("personal", &["personal"], &[])];
    let pools = Pools::resolve(defs, &keys(), &Pools::default());
    let mut every =
        vec![(KeyId::new("k_w1"), org(b'a')), (KeyId::new("k_w2"), org(b'b')), (KeyId::new("k_p1"), org(b'b'))];
    assert_eq!(pools.reach("work").bare_id_keys(&every), Ok(Some(ids(&["k_w1"]))));
    assert_eq!(pools.reach("personal").bare_id_keys(&every), Err("work".to_owned()), "its only organization is shared");
    assert_eq!(pools.reach("all").bare_id_keys(&every), Ok(None), "no boundary to keep");
    // An organization not known yet counts as shared, on either side.
    every[0].1 = None;
    assert_eq!(pools.reach("work").bare_id_keys(&every), Err("personal".to_owned()));
    every[0].1 = org(b'a');
    every[2].1 = None;
    assert_eq!(pools.reach("work").bare_id_keys(&every), Err("personal".to_owned()));
}

#[test]
fn only_tiers_above_the_standard_one_are_held_back() {
    for tier in ["priority", "Priority", "fast", "ultrafast"] {
        assert!(above_standard(tier), "{tier}");
    }
    for tier in ["default", "auto", "flex", "scale", ""] {
        assert!(!above_standard(tier), "{tier}");
    }
}

#[test]
fn a_pool_sends_each_tier_it_does_not_allow_in_the_one_it_does() {
    use crate::spend::ServiceTier;
    let policies =
        |allow_priority, allow_ultrafast| PoolPolicies { allow_priority, allow_ultrafast, ..PoolPolicies::default() };
    // (allow_priority, allow_ultrafast) -> what priority, fast, ultrafast and flex are sent as.
    for ((p, u), expected) in [
        ((true, true), [None, None, None, None]),
        ((true, false), [None, None, Some(PRIORITY_TIER), None]),
        ((false, true), [Some(STANDARD_TIER), Some(STANDARD_TIER), Some(STANDARD_TIER), None]),
        ((false, false), [Some(STANDARD_TIER), Some(STANDARD_TIER), Some(STANDARD_TIER), None]),
    ] {
        let sent = ["priority", "FAST", "ultrafast", "flex"].map(|t| policies(p, u).sent_tier(t));
        assert_eq!(sent, expected, "allow_priority {p}, allow_ultrafast {u}");
        let offered = [ServiceTier::Priority, ServiceTier::Ultrafast].map(|t| policies(p, u).offers(t));
        assert_eq!(offered, [p, p && u], "allow_priority {p}, allow_ultrafast {u}");
    }
    assert!(PoolPolicies::default().allow_ultrafast, "a pool allows ultrafast unless told not to");
    assert_eq!(policies(true, false).departures(), ["no ultrafast"]);
    assert!(policies(true, false).summary(false).starts_with("priority tier allowed, ultrafast sent as priority"));
}

#[test]
fn the_standard_tier_replaces_only_the_tier_and_keeps_the_order() {
    let body = br#"{"model":"m","service_tier":"priority","input":[{"role":"user","content":"hi"}],"stream":true}"#;
    let changed = String::from_utf8(with_tier(body, STANDARD_TIER).expect("a JSON object")).expect("utf-8");
    assert_eq!(
        changed,
        r#"{"model":"m","service_tier":"default","input":[{"role":"user","content":"hi"}],"stream":true}"#
    );
    assert_eq!(with_tier(b"[1]", STANDARD_TIER), None);
}

#[test]
fn proxies_are_checked_and_credentials_never_quoted() {
    assert_eq!(check_proxy("http://proxy.example:3128/").as_deref(), Ok("http://proxy.example:3128"));
    assert_eq!(check_proxy("HTTPS://[::1]:8443").as_deref(), Ok("https://[::1]:8443"));
    assert_eq!(check_proxy("http://proxy.example").as_deref(), Ok("http://proxy.example"));
    assert_eq!(check_proxy("socks5://127.0.0.1:1080").as_deref(), Ok("socks5://127.0.0.1:1080"));
    assert_eq!(check_proxy("SOCKS5H://proxy.example:1080").as_deref(), Ok("socks5h://proxy.example:1080"));
    for bad in ["proxy.example:3128", "socks4://p:1080", "ftp://p:21", "http://p:3128/path", "http://p:port", "http://"]
    {
        assert!(check_proxy(bad).is_err(), "{bad}");
    }
    let err = check_proxy("http://alice:s3cret@proxy.example:3128").expect_err("credentials refused");
    assert!(!err.contains("s3cret") && !err.contains("alice"), "{err}");
    assert_eq!(safe_proxy("http://alice:s3cret@p:1"), "http://***@p:1");
    let split = split_proxy("http://alice:s3:cret@proxy.example:3128/").expect("readable");
    assert_eq!(split, ("http://proxy.example:3128".to_owned(), Some("alice:s3:cret".to_owned())));
    assert_eq!(split_proxy("http://proxy.example:3128"), Ok(("http://proxy.example:3128".to_owned(), None)));
    let split = split_proxy("socks5://alice:s3cret@p:1080").expect("readable");
    assert_eq!(split, ("socks5://p:1080".to_owned(), Some("alice:s3cret".to_owned())));
    let err = split_proxy("ftp://alice:s3cret@p:1").expect_err("another scheme");
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn a_key_goes_out_one_way_and_its_pools_proxy_is_found() {
    let mut work = pool("work", &["work"], &[]);
    work.policies.proxy = Some("http://127.0.0.1:3128".into());
    let mut both = pool("both", &["work", "personal"], &[]);
    let problem = validate(&[work.clone(), both.clone()], known, []).expect_err("two ways out for one key");
    assert!(problem.message.contains("a key goes out one way"), "{}", problem.message);
    both.policies.proxy = work.policies.proxy.clone();
    assert_eq!(validate(&[work.clone(), both.clone()], known, []), Ok(()));
    let pools = Pools::resolve(vec![work, pool("personal", &["personal"], &[])], &keys(), &Pools::default());
    assert_eq!(pools.proxies(), vec![(KeyId::new("k_w1"), "http://127.0.0.1:3128".to_owned(), None)]);
    assert_eq!(pools.proxy_of(&KeyId::new("k_w1")), Some("http://127.0.0.1:3128"));
    assert_eq!(pools.proxy_of(&KeyId::new("k_p1")), None);
    assert!(["work", "all", "nope"].iter().all(|p| pools.sent_tier(p, "ultrafast").is_none()), "every tier allowed");
}

#[test]
fn a_pools_policies_are_read_as_their_own_fields_with_their_defaults_and_nothing_else() {
    use crate::flat::Fields;
    let every = serde_json::to_value(PoolPolicies::default()).expect("json");
    let names: Vec<&str> = every.as_object().expect("an object").keys().map(String::as_str).collect();
    assert_eq!(names, PoolPolicies::FIELDS, "the fields read are the fields written");
    let money = serde_json::to_value(crate::budget::MoneyBudget::default()).expect("json");
    assert_eq!(money.as_object().expect("an object").keys().collect::<Vec<_>>(), crate::budget::MoneyBudget::FIELDS);

    let text = "name = \"work\"\nallow_priority = false\ndaily_budget_usd = 5\non_limit = \"stop\"\n";
    let work: PoolConfig = toml::from_str(text).expect("a pool with its policies");
    assert!(!work.policies.allow_priority && work.policies.money.daily.is_some(), "{work:?}");
    let plain: PoolConfig = toml::from_str("name = \"home\"\n").expect("a pool without policies");
    assert_eq!(plain.policies, PoolPolicies::default(), "each policy at its default");
    assert!(plain.policies.allow_priority, "a pool allows the priority tier unless told not to");
    for typo in ["name = \"w\"\nallow_priorty = false\n", "name = \"w\"\ndaily_budget = 5\n"] {
        let e = toml::from_str::<PoolConfig>(typo).expect_err("an unknown field is refused");
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
    let e = toml::from_str::<PoolConfig>("name = \"w\"\nallow_priority = \"no\"\n").expect_err("a wrong type");
    assert!(e.to_string().contains("invalid type"), "{e}");

    let settable = crate::change::names(&[every]);
    let change: PoolPoliciesChange =
        crate::change::read(serde_json::json!({ "proxy": null, "reserve_at": 80 }), &settable).expect("a change");
    let mut policies = PoolPolicies { proxy: Some("http://p:1".into()), ..PoolPolicies::default() };
    change.apply(&mut policies);
    assert_eq!((policies.proxy, policies.money.reserve_at, policies.allow_priority), (None, Some(80), true));
}
