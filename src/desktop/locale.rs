//! The languages the tray's window announces to the dashboard (`navigator.language`, the default
//! locale of the page's `Intl`, `Accept-Language`), as BCP 47 tags made from the user's locale.
//!
//! Left to itself, WebKitGTK takes them from `LC_CTYPE` and cuts the codeset off: `C.UTF-8` (Debian's
//! and most containers' default) becomes `C`, and `sr_RS@latin` becomes `sr-RS@latin`, neither of them
//! a language tag. The dashboard's chart library makes an `Intl.NumberFormat` of `navigator.language`
//! as it loads; with `C` that throws a `RangeError`, the page's script stops before it logs in, and
//! the window stays blank. So the tray gives WebKit the list itself, read the way GTK reads the
//! language of messages: `LANGUAGE`'s list first, then the locale of `LC_ALL`, `LC_MESSAGES` or `LANG`
//! (the first that is set). The C and POSIX locales, and anything that makes no tag, are left out;
//! with nothing left the list is `en-US`, which is what WebKit itself uses for C. A locale need not be
//! installed to be used here: the page's `Intl` has its own data.

/// The language when the locale names none (C, POSIX, unset).
pub const FALLBACK: &str = "en-US";

/// The variables that name the language of messages, in the order they count (after `LANGUAGE`).
const LOCALE_VARS: [&str; 3] = ["LC_ALL", "LC_MESSAGES", "LANG"];

/// The window's languages, most wanted first, from the variables `var` reads (`std::env::var`, or a
/// table in tests). Never empty; no tag twice.
pub fn web_languages(var: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    let mut names: Vec<String> =
        set("LANGUAGE").map(|list| list.split(':').map(str::to_owned).collect()).unwrap_or_default();
    names.extend(LOCALE_VARS.iter().find_map(|name| set(name)));
    let mut tags: Vec<String> = Vec::new();
    for tag in names.iter().filter_map(|name| tag(name)) {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    if tags.is_empty() {
        tags.push(FALLBACK.to_owned());
    }
    tags
}

/// The BCP 47 tag of a POSIX locale name (`language[_territory][.codeset][@modifier]`): `de_AT.UTF-8`
/// is `de-AT`, `sr_RS@latin` is `sr-Latn-RS`, `ca_ES.UTF-8@valencia` is `ca-ES-valencia`. `None` for
/// C and POSIX (which name no language) and for a name that makes no tag.
pub fn tag(locale: &str) -> Option<String> {
    let (rest, modifier) = match locale.split_once('@') {
        Some((rest, modifier)) => (rest, Some(modifier)),
        None => (locale, None),
    };
    let name = rest.split_once('.').map_or(rest, |(name, _codeset)| name);
    let (language, territory) = match name.split_once('_') {
        Some((language, territory)) => (language, Some(territory)),
        None => (name, None),
    };
    let alpha = |s: &str, lengths: std::ops::RangeInclusive<usize>| {
        lengths.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphabetic())
    };
    // ISO 639 codes, two or three letters: one-letter `C` is no language, nor is `POSIX`.
    if !alpha(language, 2..=3) {
        return None;
    }
    let mut tag = language.to_ascii_lowercase();
    let (script, variant) = match modifier {
        Some(m) => modifier_subtags(m),
        None => (None, None),
    };
    if let Some(script) = script {
        tag.push('-');
        tag.push_str(script);
    }
    match territory {
        Some(t) if alpha(t, 2..=2) => {
            tag.push('-');
            tag.push_str(&t.to_ascii_uppercase());
        }
        Some(t) if t.len() == 3 && t.bytes().all(|b| b.is_ascii_digit()) => {
            tag.push('-');
            tag.push_str(t);
        }
        Some(_) => return None,
        None => {}
    }
    if let Some(variant) = variant {
        tag.push('-');
        tag.push_str(variant);
    }
    Some(tag)
}

/// The script or variant subtag a locale's modifier stands for (glibc's modifiers); others (`euro`)
/// say nothing about the language and are dropped.
fn modifier_subtags(modifier: &str) -> (Option<&'static str>, Option<&'static str>) {
    match modifier.to_ascii_lowercase().as_str() {
        "latin" | "iqtelif" => (Some("Latn"), None),
        "cyrillic" => (Some("Cyrl"), None),
        "devanagari" => (Some("Deva"), None),
        "valencia" => (None, Some("valencia")),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Vec<String> {
        web_languages(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()))
    }

    #[test]
    fn c_utf8_names_no_language_and_falls_back_to_en_us() {
        // WebKit's own reading made `C` of these, which no Intl constructor takes.
        for locale in ["C.UTF-8", "C.utf8", "C", "POSIX", ""] {
            assert_eq!(from(&[("LANG", locale)]), ["en-US"], "LANG={locale}");
            assert_eq!(from(&[("LC_ALL", locale)]), ["en-US"], "LC_ALL={locale}");
        }
        assert_eq!(from(&[]), ["en-US"]);
    }

    #[test]
    fn a_locale_becomes_its_tag_installed_or_not() {
        assert_eq!(from(&[("LANG", "de_AT.UTF-8")]), ["de-AT"]);
        assert_eq!(from(&[("LANG", "en_US.UTF-8")]), ["en-US"]);
        assert_eq!(from(&[("LANG", "pt_BR")]), ["pt-BR"]);
        assert_eq!(from(&[("LANG", "fil_PH.UTF-8")]), ["fil-PH"]);
    }

    #[test]
    fn modifiers_become_scripts_or_variants_or_go() {
        assert_eq!(tag("sr_RS@latin").as_deref(), Some("sr-Latn-RS"));
        assert_eq!(tag("sr_RS.UTF-8@latin").as_deref(), Some("sr-Latn-RS"));
        assert_eq!(tag("uz_UZ.UTF-8@cyrillic").as_deref(), Some("uz-Cyrl-UZ"));
        assert_eq!(tag("ca_ES.UTF-8@valencia").as_deref(), Some("ca-ES-valencia"));
        assert_eq!(tag("de_DE@euro").as_deref(), Some("de-DE"));
    }

    #[test]
    fn what_makes_no_tag_is_left_out() {
        for locale in ["C.UTF-8", "POSIX", "x", "english", "en_USA", "en_U1", "12_US"] {
            assert_eq!(tag(locale), None, "{locale:?}");
        }
    }

    #[test]
    fn lc_all_then_lc_messages_then_lang_and_language_before_them() {
        let vars = [("LANG", "fr_FR.UTF-8"), ("LC_MESSAGES", "it_IT.UTF-8"), ("LC_ALL", "de_DE.UTF-8")];
        assert_eq!(from(&vars), ["de-DE"]);
        assert_eq!(from(&vars[..2]), ["it-IT"]);
        assert_eq!(from(&[("LC_ALL", ""), ("LANG", "fr_FR.UTF-8")]), ["fr-FR"], "empty is unset");
        assert_eq!(from(&[("LANGUAGE", "pt_BR:pt:en"), ("LANG", "pt_BR.UTF-8")]), ["pt-BR", "pt", "en"]);
        assert_eq!(from(&[("LANGUAGE", "::"), ("LC_ALL", "C.UTF-8")]), ["en-US"]);
        // LC_CTYPE, which WebKit read, names the characters, not the language.
        assert_eq!(from(&[("LC_CTYPE", "C.UTF-8"), ("LANG", "nl_NL.UTF-8")]), ["nl-NL"]);
    }
}
