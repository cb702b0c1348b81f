//! Arithmetic over a file's numeric parameters, for the amounts a metric may compute from them
//! (`scale = "1000 / (groups * fds * fds * loops)"`, `refuse_below = "seconds - 1.5"`): numbers,
//! names, `+ - * /`, unary minus, parentheses and `max(a, b, ...)`, `min(...)`, in `f64`. Written here because the
//! expression crates divide integers as integers (evalexpr: `1 / 2` is 0), which a scale must
//! not, and four operators are all a file needs.

/// The longest expression and the deepest nesting a file may write (bounded work for any input).
const MAX_LEN: usize = 256;
const MAX_DEPTH: usize = 32;

/// The names `text` uses, in order; an error says what is wrong with its syntax.
pub(super) fn variables(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut note = |name: &str| {
        names.push(name.to_string());
        Some(1.0)
    };
    Parser::new(text, &mut note)?.whole(false)?;
    Ok(names)
}

/// `text`'s value, each name looked up with `value_of`.
pub(super) fn eval(
    text: &str,
    value_of: &mut dyn FnMut(&str) -> Option<f64>,
) -> Result<f64, String> {
    Parser::new(text, value_of)?.whole(true)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f64),
    Name(String),
    Op(char),
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
    value_of: &'a mut dyn FnMut(&str) -> Option<f64>,
}

impl<'a> Parser<'a> {
    fn new(text: &str, value_of: &'a mut dyn FnMut(&str) -> Option<f64>) -> Result<Self, String> {
        if text.len() > MAX_LEN {
            return Err(format!("longer than {MAX_LEN} characters"));
        }
        Ok(Parser {
            tokens: tokenize(text)?,
            at: 0,
            depth: 0,
            value_of,
        })
    }

    /// The whole expression; with `checked`, a division by zero or a result that is not finite
    /// is an error.
    fn whole(mut self, checked: bool) -> Result<f64, String> {
        let v = self.sum(checked)?;
        match self.tokens.get(self.at) {
            None if checked && !v.is_finite() => Err(format!("{v} is not a finite number")),
            None => Ok(v),
            Some(t) => Err(format!(
                "unexpected {} after a complete expression",
                show(t)
            )),
        }
    }

    fn sum(&mut self, checked: bool) -> Result<f64, String> {
        let mut v = self.product(checked)?;
        while let Some(Token::Op(op @ ('+' | '-'))) = self.tokens.get(self.at).cloned() {
            self.at += 1;
            let rhs = self.product(checked)?;
            v = if op == '+' { v + rhs } else { v - rhs };
        }
        Ok(v)
    }

    fn product(&mut self, checked: bool) -> Result<f64, String> {
        let mut v = self.factor(checked)?;
        while let Some(Token::Op(op @ ('*' | '/'))) = self.tokens.get(self.at).cloned() {
            self.at += 1;
            let rhs = self.factor(checked)?;
            if op == '/' && rhs == 0.0 && checked {
                return Err("divides by zero".into());
            }
            v = if op == '*' { v * rhs } else { v / rhs };
        }
        Ok(v)
    }

    fn factor(&mut self, checked: bool) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        let v = match token {
            Some(Token::Number(n)) => n,
            Some(Token::Name(name)) if self.tokens.get(self.at) == Some(&Token::Op('(')) => {
                self.call(&name, checked)?
            }
            Some(Token::Name(name)) => (self.value_of)(&name).ok_or_else(|| {
                format!("{name:?} is neither a numeric parameter nor a metric before it")
            })?,
            Some(Token::Op('-')) => -self.factor(checked)?,
            Some(Token::Op('(')) => {
                let v = self.sum(checked)?;
                if self.tokens.get(self.at) != Some(&Token::Op(')')) {
                    return Err("a ( without its )".into());
                }
                self.at += 1;
                v
            }
            Some(t) => return Err(format!("unexpected {}", show(&t))),
            None => return Err("ends where a number or a name should be".into()),
        };
        self.depth -= 1;
        Ok(v)
    }
}

impl Parser<'_> {
    /// `max(...)` or `min(...)` of one or more comma-separated expressions; `(` is next.
    fn call(&mut self, name: &str, checked: bool) -> Result<f64, String> {
        let pick: fn(f64, f64) -> f64 = match name {
            "max" => f64::max,
            "min" => f64::min,
            other => return Err(format!("{other}( is not a function (max, min)")),
        };
        self.at += 1;
        let mut v = self.sum(checked)?;
        loop {
            match self.tokens.get(self.at) {
                Some(Token::Op(',')) => {
                    self.at += 1;
                    v = pick(v, self.sum(checked)?);
                }
                Some(Token::Op(')')) => {
                    self.at += 1;
                    return Ok(v);
                }
                _ => return Err(format!("{name}( without its )")),
            }
        }
    }
}

fn show(t: &Token) -> String {
    match t {
        Token::Number(n) => format!("number {n}"),
        Token::Name(n) => format!("name {n:?}"),
        Token::Op(c) => format!("{c:?}"),
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let mut run = |keep: fn(char) -> bool| {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !keep(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            &text[i..end]
        };
        match c {
            ' ' | '\t' => {}
            '+' | '-' | '*' | '/' | '(' | ')' | ',' => out.push(Token::Op(c)),
            '0'..='9' | '.' => {
                let n = run(|d| d.is_ascii_digit() || d == '.' || d == 'e' || d == 'E');
                let value = n.parse().map_err(|_| format!("{n:?} is not a number"))?;
                out.push(Token::Number(value));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let name = run(|d| d.is_ascii_alphanumeric() || d == '_');
                out.push(Token::Name(name.to_string()));
            }
            other => {
                return Err(format!(
                    "{other:?} at character {}: use + - * / ( ) max min",
                    i + 1
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("an empty expression".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Result<f64, String> {
        let mut params = |n: &str| match n {
            "groups" => Some(4.0),
            "fds" => Some(10.0),
            "loops" => Some(750.0),
            _ => None,
        };
        eval(text, &mut params)
    }

    #[test]
    fn arithmetic_in_real_numbers_with_the_usual_precedence() {
        assert_eq!(
            of("1000 / (groups * fds * fds * loops)"),
            Ok(1000.0 / 300_000.0)
        );
        assert_eq!(of("1 / 2"), Ok(0.5));
        assert_eq!(of("2 + 3 * 4"), Ok(14.0));
        assert_eq!(of("(2 + 3) * 4"), Ok(20.0));
        assert_eq!(of("-loops + 1e3"), Ok(250.0));
        assert_eq!(of("10 - 4 - 3"), Ok(3.0));
        assert_eq!(of("8 / 4 / 2"), Ok(1.0));
        assert_eq!(
            variables("groups * (fds + 1)"),
            Ok(vec!["groups".into(), "fds".into()])
        );
    }

    #[test]
    fn what_is_wrong_is_said() {
        let err = |t: &str| of(t).unwrap_err();
        assert!(err("seconds * 2").contains("\"seconds\" is neither a numeric parameter"));
        assert!(err("1 / (fds - 10)").contains("divides by zero"));
        assert!(err("(1 + 2").contains("a ( without its )"));
        assert!(err("1 2").contains("unexpected number 2"));
        assert!(err("2 ^ 3").contains("'^' at character 3"));
        assert!(err("").contains("empty"));
        assert!(err("pow(2, 3)").contains("pow( is not a function"));
        assert!(err("max(1, 2").contains("max( without its )"));
        assert!(err("1 +").contains("ends where"));
        assert!(err(&"(".repeat(40)).contains("nested deeper than 32"));
        assert!(err(&"1+".repeat(200)).contains("longer than 256"));
        // Syntax alone: names are not looked up, so a division by a name is fine.
        assert!(variables("1 / x").is_ok());
    }
}
