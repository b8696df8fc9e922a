//! The preview of a setup: a small unified diff of the lines that change, every line passed through a
//! mask first so no secret is shown.

/// Unchanged lines shown around a change.
const CONTEXT: usize = 2;
/// The largest comparison made line by line (changed lines before × after, after the common start and
/// end are set aside). Client configs are far smaller; a larger one is summarised instead.
const MAX_CELLS: usize = 1 << 20;
/// The most changed lines a preview lists.
const MAX_SHOWN: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The steps that turn `old` into `new` (a longest common subsequence of lines), or `None` when the
/// changed middle is too large to compare.
fn ops<'a>(old: &[&'a str], new: &[&'a str]) -> Option<Vec<(Op, &'a str)>> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..].iter().rev().zip(new[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
    let (a, b) = (&old[prefix..old.len() - suffix], &new[prefix..new.len() - suffix]);
    if a.len().saturating_mul(b.len()) > MAX_CELLS {
        return None;
    }
    let mut out: Vec<(Op, &str)> = old[..prefix].iter().map(|l| (Op::Same, *l)).collect();
    // `longest[i * w + j]`: the longest common subsequence of `a[i..]` and `b[j..]`.
    let w = b.len() + 1;
    let mut longest = vec![0u32; (a.len() + 1) * w];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            longest[i * w + j] = if a[i] == b[j] {
                longest[(i + 1) * w + j + 1] + 1
            } else {
                longest[(i + 1) * w + j].max(longest[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push((Op::Same, a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j == b.len() || (i < a.len() && longest[(i + 1) * w + j] >= longest[i * w + j + 1]) {
            out.push((Op::Removed, a[i]));
            i += 1;
        } else {
            out.push((Op::Added, b[j]));
            j += 1;
        }
    }
    out.extend(old[old.len() - suffix..].iter().map(|l| (Op::Same, *l)));
    Some(out)
}

/// The lines of `old` that are gone from `new`, and the lines of `new` that were not in `old`, in order.
#[cfg(test)]
pub(super) fn changed_lines(old: &[&str], new: &[&str]) -> (Vec<String>, Vec<String>) {
    let ops = ops(old, new).unwrap_or_default();
    let pick = |kind: Op| ops.iter().filter(|(op, _)| *op == kind).map(|(_, l)| (*l).to_owned()).collect();
    (pick(Op::Removed), pick(Op::Added))
}

/// A unified diff from `old` (`None`: the file does not exist) to `new`, headed by `title`, with every
/// shown line passed through `mask`.
pub(super) fn unified(title: &str, old: Option<&str>, new: &str, mask: &dyn Fn(&str) -> String) -> String {
    let before = match old {
        Some(_) => title.to_owned(),
        None => "/dev/null".to_owned(),
    };
    let mut out = format!("--- {before}\n+++ {title} (with Keymux)\n");
    let (a, b): (Vec<&str>, Vec<&str>) = (old.unwrap_or("").lines().collect(), new.lines().collect());
    let Some(ops) = ops(&a, &b) else {
        out.push_str(&format!(
            "(the change touches a large part of a {}-line file; compare it with the backup after applying)\n",
            a.len()
        ));
        return out;
    };
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != Op::Same).collect();
    // Where each step stands in the old and the new file (1-based).
    let mut at = Vec::with_capacity(ops.len() + 1);
    let (mut o, mut n) = (1, 1);
    for (op, _) in &ops {
        at.push((o, n));
        match op {
            Op::Same => (o, n) = (o + 1, n + 1),
            Op::Removed => o += 1,
            Op::Added => n += 1,
        }
    }
    let mut k = 0;
    let mut shown = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        while k + 1 < changed.len() && changed[k + 1] <= changed[k] + 2 * CONTEXT + 1 {
            k += 1;
        }
        let end = (changed[k] + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let old_count = hunk.iter().filter(|(op, _)| *op != Op::Added).count();
        let new_count = hunk.iter().filter(|(op, _)| *op != Op::Removed).count();
        let (o, n) = at[start];
        out.push_str(&format!("@@ -{} +{} @@\n", range(o, old_count), range(n, new_count)));
        for (op, line) in hunk {
            let sign = match op {
                Op::Same => ' ',
                Op::Removed => '-',
                Op::Added => '+',
            };
            out.push_str(&format!("{sign}{}\n", mask(line)));
            shown += usize::from(*op != Op::Same);
        }
        k += 1;
        if shown >= MAX_SHOWN && k < changed.len() {
            out.push_str(&format!("… and {} more changed lines\n", changed.len() - k));
            break;
        }
    }
    out
}

/// A unified diff's `start,count` (an empty range names the line before it).
fn range(start: usize, count: usize) -> String {
    if count == 0 {
        format!("{},0", start - 1)
    } else {
        format!("{start},{count}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(line: &str) -> String {
        line.to_owned()
    }

    #[test]
    fn a_change_shows_with_two_lines_of_context_and_line_numbers() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n";
        let diff = unified("f.toml", Some(old), new, &keep);
        assert_eq!(
            diff,
            "--- f.toml\n+++ f.toml (with Keymux)\n@@ -3,5 +3,5 @@\n c\n d\n-e\n+E\n f\n g\n@@ -9,2 +9,3 @@\n i\n j\n+k\n"
        );
    }

    #[test]
    fn a_new_file_is_all_additions_and_every_line_is_masked() {
        let diff = unified("m.json", None, "{\n  \"k\": \"secret\"\n}\n", &|l: &str| l.replace("secret", "s…"));
        assert_eq!(diff, "--- /dev/null\n+++ m.json (with Keymux)\n@@ -0,0 +1,3 @@\n+{\n+  \"k\": \"s…\"\n+}\n");
    }

    #[test]
    fn nothing_changed_shows_no_hunk_and_a_huge_change_is_summarised() {
        assert_eq!(unified("f", Some("a\n"), "a\n", &keep), "--- f\n+++ f (with Keymux)\n");
        let old: String = (0..2000).map(|i| format!("old {i}\n")).collect();
        let new: String = (0..2000).map(|i| format!("new {i}\n")).collect();
        let diff = unified("f", Some(&old), &new, &keep);
        assert!(diff.contains("2000-line file") && diff.lines().count() == 3, "{diff}");
    }

    #[test]
    fn changed_lines_are_found_in_order() {
        let (removed, added) = changed_lines(&["a", "b", "c", "d"], &["a", "x", "c", "d", "y"]);
        assert_eq!((removed, added), (vec!["b".to_owned()], vec!["x".to_owned(), "y".to_owned()]));
    }
}
