//! Prolog text in and out: every value that enters a query is a quoted atom (so no input can
//! change the query's shape), and answers print back as text.

use scryer_prolog::Term;

/// `value` as a quoted Prolog atom: `'...'` with `\` and `'` escaped and every character that
/// is not printable ASCII written as a `\xHH\` escape, so a newline, a quote or `:-` in an
/// agent id or a URI stays inside the atom.
pub(crate) fn atom(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            other => out.push_str(&format!("\\x{:x}\\", u32::from(other))),
        }
    }
    out.push('\'');
    out
}

/// A term as a policy author would read it (atoms unquoted where they need no quotes).
pub(crate) fn show(term: &Term) -> String {
    match term {
        Term::Atom(a) => show_atom(a),
        Term::String(s) => format!("{s:?}"),
        Term::Integer(i) => i.to_string(),
        Term::Float(f) => f.to_string(),
        Term::Rational(r) => r.to_string(),
        Term::Var(v) => v.clone(),
        Term::List(items) => format!(
            "[{}]",
            items.iter().map(show).collect::<Vec<_>>().join(", ")
        ),
        Term::Compound(name, args) if args.len() == 2 && name == "/" => {
            format!("{}/{}", show(&args[0]), show(&args[1]))
        }
        Term::Compound(name, args) if args.len() == 2 && is_operator(name) => {
            format!("{} {name} {}", show(&args[0]), show(&args[1]))
        }
        Term::Compound(name, args) if name == "\\+" && args.len() == 1 => {
            format!("\\+ {}", show(&args[0]))
        }
        Term::Compound(name, args) => format!(
            "{}({})",
            show_atom(name),
            args.iter().map(show).collect::<Vec<_>>().join(", ")
        ),
        other => format!("{other:?}"),
    }
}

fn is_operator(name: &str) -> bool {
    matches!(
        name,
        "-" | "=" | ">=" | "=<" | ">" | "<" | "==" | "\\=" | "is" | "," | "=:="
    )
}

fn show_atom(a: &str) -> String {
    let plain = a.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain || a == "[]" {
        a.to_owned()
    } else {
        atom(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_every_character_inside_the_atom() {
        assert_eq!(atom("alice"), "'alice'");
        assert_eq!(atom("o'brien"), "'o\\'brien'");
        assert_eq!(atom("a\\b"), "'a\\\\b'");
        assert_eq!(atom("x').\nhalt."), "'x\\').\\xa\\halt.'");
        assert_eq!(atom("é"), "'\\xe9\\'");
    }

    #[test]
    fn answers_print_as_authors_write_them() {
        let t = Term::Compound(
            "has_permission".into(),
            vec![Term::Atom("alice".into()), Term::Atom("mcp_access".into())],
        );
        assert_eq!(show(&t), "has_permission(alice, mcp_access)");
        assert_eq!(show(&Term::Atom("mcp://docs/a".into())), "'mcp://docs/a'");
    }
}
