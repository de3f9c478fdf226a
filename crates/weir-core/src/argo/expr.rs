//! The subset of Argo Rollouts' condition language (expr-lang/expr) that analysis templates use.
//!
//! Argo evaluates a metric's `successCondition` and `failureCondition` with `result` bound to the
//! provider's value. This module parses an expression once ([`Expr::parse`]) and evaluates it
//! against a value ([`Expr::evaluate`], [`Expr::evaluate_bool`]). It reads:
//!
//! - literals: numbers (`0.95`, `5`, `1e3`), strings (`'a'`, `"a"`), `true`, `false`, `nil`;
//! - the name `result`, member access (`result.foo`, `result["foo"]`), indexing (`result[0]`);
//! - `||` / `or`, `&&` / `and`, `!` / `not`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `+`, `-`, `*`, `/`,
//!   `%`, unary `-`, parentheses;
//! - the functions Argo adds, `isNaN`, `isInf`, `isNil`, `default(value, fallback)`, `asInt`,
//!   `asFloat`, and expr's `len` and `all(list, predicate)` (a predicate with `#`, `.field` or a
//!   `{ ... }` closure);
//! - an argument placeholder outside a string (`{{ args.max }}`), which Argo replaces before
//!   evaluating: it parses, and evaluating it is an error until it is resolved.
//!
//! Anything else (other names, functions such as `filter` or `map`, operators such as `matches`,
//! `in`, `??` or `? :`) is refused by name when the expression is parsed. Evaluation errors are
//! what Argo records as a measurement Error. Nothing here panics: input length and nesting depth
//! are bounded.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// The longest expression read, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// The deepest nesting of an expression.
const MAX_DEPTH: usize = 64;

/// The functions an expression may call.
pub const FUNCTIONS: &str = "len, all, isNaN, isInf, isNil, default, asInt, asFloat";

/// A value an expression works on: JSON's values, with numbers as `f64` so that Prometheus'
/// `NaN` and `±Inf` are values too.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// `nil`.
    Nil,
    /// A boolean.
    Bool(bool),
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<Val>),
    /// A mapping.
    Map(BTreeMap<String, Val>),
}

impl Val {
    /// A JSON value as an expression value.
    pub fn from_json(value: &Value) -> Val {
        match value {
            Value::Null => Val::Nil,
            Value::Bool(flag) => Val::Bool(*flag),
            Value::Number(number) => Val::Num(number.as_f64().unwrap_or(f64::NAN)),
            Value::String(text) => Val::Str(text.clone()),
            Value::Array(items) => Val::List(items.iter().map(Val::from_json).collect()),
            Value::Object(map) => Val::Map(
                map.iter()
                    .map(|(key, value)| (key.clone(), Val::from_json(value)))
                    .collect(),
            ),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Val::Nil => "nil",
            Val::Bool(_) => "bool",
            Val::Num(_) => "number",
            Val::Str(_) => "string",
            Val::List(_) => "list",
            Val::Map(_) => "map",
        }
    }
}

/// Why an expression could not be read: the reason names what is not understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset in the expression.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

/// Why an evaluation failed (Argo: the measurement is an Error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// A function weir evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Len,
    IsNaN,
    IsInf,
    IsNil,
    Default,
    AsInt,
    AsFloat,
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Literal(Val),
    /// `result`.
    Result,
    /// `#`, the element of `all`'s predicate.
    Element,
    /// `{{ ... }}`, resolved by Argo before evaluation.
    Placeholder(String),
    /// `!x`.
    Not(Box<Expr>),
    /// `-x`.
    Neg(Box<Expr>),
    /// `x OP y`.
    Binary(Box<Expr>, BinaryOp, Box<Expr>),
    /// `x.name` or `x["name"]`.
    Member(Box<Expr>, String),
    /// `x[i]`.
    Index(Box<Expr>, Box<Expr>),
    /// `f(args)`.
    Call(BuiltinFn, Vec<Expr>),
    /// `all(list, predicate)`.
    All(Box<Expr>, Box<Expr>),
}

/// A binary operator (opaque).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryOp(BinOp);

/// A builtin function (opaque).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinFn(Func);

// === tokens ===

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Placeholder(String),
    Op(&'static str),
    Hash,
    Dot,
    Comma,
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
}

fn tokenize(text: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    let error = |offset: usize, message: String| ParseError { offset, message };
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if text[i..].starts_with("{{") {
            let Some(end) = text[i + 2..].find("}}") else {
                return Err(error(i, "`{{` without `}}`".into()));
            };
            let inner = text[i + 2..i + 2 + end].trim().to_string();
            i += end + 4;
            tokens.push((start, Tok::Placeholder(inner)));
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < bytes.len()
                && (bytes[i].is_ascii_digit() || bytes[i] == b'.' || bytes[i] == b'_')
            {
                if bytes[i] == b'.' && bytes.get(i + 1) == Some(&b'.') {
                    break;
                }
                i += 1;
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let literal = text[start..i].replace('_', "");
            let number: f64 = literal
                .parse()
                .map_err(|_| error(start, format!("`{}` is not a number", &text[start..i])))?;
            tokens.push((start, Tok::Num(number)));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' || c == b'$' {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'$')
            {
                i += 1;
            }
            tokens.push((start, Tok::Ident(text[start..i].to_string())));
            continue;
        }
        if c == b'"' || c == b'\'' || c == b'`' {
            let (value, next) = string_literal(text, i)?;
            i = next;
            tokens.push((start, Tok::Str(value)));
            continue;
        }
        const OPERATORS: [&str; 22] = [
            "||", "&&", "==", "!=", "<=", ">=", "??", "?.", "..", "**", "|", "!", "<", ">", "+",
            "-", "*", "/", "%", "?", ":", "^",
        ];
        if let Some(op) = OPERATORS.iter().find(|op| text[i..].starts_with(**op)) {
            i += op.len();
            tokens.push((start, Tok::Op(op)));
            continue;
        }
        let tok = match c {
            b'#' => Tok::Hash,
            b'.' => Tok::Dot,
            b',' => Tok::Comma,
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b'[' => Tok::LBracket,
            b']' => Tok::RBracket,
            b'{' => Tok::LBrace,
            b'}' => Tok::RBrace,
            _ => {
                let shown = text[i..].chars().next().unwrap_or('?');
                return Err(error(i, format!("unexpected character {shown:?}")));
            }
        };
        i += 1;
        tokens.push((start, tok));
    }
    Ok(tokens)
}

/// Reads a quoted string starting at `start`; returns its value and the offset after it.
fn string_literal(text: &str, start: usize) -> Result<(String, usize), ParseError> {
    let quote = text[start..].chars().next().unwrap_or('"');
    let mut value = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((offset, c)) = chars.next() {
        if c == quote {
            return Ok((value, start + 1 + offset + c.len_utf8()));
        }
        if c == '\\' && quote != '`' {
            let escaped = match chars.next() {
                Some((_, 'n')) => '\n',
                Some((_, 't')) => '\t',
                Some((_, 'r')) => '\r',
                Some((_, other)) => other,
                None => break,
            };
            value.push(escaped);
        } else {
            value.push(c);
        }
    }
    Err(ParseError {
        offset: start,
        message: "a string without its closing quote".into(),
    })
}

// === parser ===

struct Parser {
    tokens: Vec<(usize, Tok)>,
    position: usize,
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.position).map(|(_, tok)| tok)
    }

    fn offset(&self) -> usize {
        self.tokens
            .get(self.position)
            .map_or(self.end, |(offset, _)| *offset)
    }

    fn next(&mut self) -> Option<Tok> {
        let tok = self.tokens.get(self.position).map(|(_, tok)| tok.clone());
        if tok.is_some() {
            self.position += 1;
        }
        tok
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            offset: self.offset(),
            message: message.into(),
        })
    }

    fn expect(&mut self, wanted: &Tok, what: &str) -> Result<(), ParseError> {
        if self.peek() == Some(wanted) {
            self.position += 1;
            Ok(())
        } else {
            let found = self.describe_next();
            self.error(format!("expected {what}, found {found}"))
        }
    }

    fn describe_next(&self) -> String {
        match self.peek() {
            None => "the end".into(),
            Some(Tok::Num(number)) => format!("number {number}"),
            Some(Tok::Str(text)) => format!("string {text:?}"),
            Some(Tok::Ident(name)) => format!("`{name}`"),
            Some(Tok::Placeholder(name)) => format!("`{{{{{name}}}}}`"),
            Some(Tok::Op(op)) => format!("`{op}`"),
            Some(Tok::Hash) => "`#`".into(),
            Some(Tok::Dot) => "`.`".into(),
            Some(Tok::Comma) => "`,`".into(),
            Some(Tok::LParen) => "`(`".into(),
            Some(Tok::RParen) => "`)`".into(),
            Some(Tok::LBracket) => "`[`".into(),
            Some(Tok::RBracket) => "`]`".into(),
            Some(Tok::LBrace) => "`{`".into(),
            Some(Tok::RBrace) => "`}`".into(),
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.error(format!("nested more than {MAX_DEPTH} deep"));
        }
        Ok(())
    }

    /// The binary operator next, with its precedence, if any.
    fn binary_operator(&self) -> Result<Option<(BinOp, u8)>, ParseError> {
        let op = match self.peek() {
            Some(Tok::Op(op)) => *op,
            Some(Tok::Ident(word)) => match word.as_str() {
                "or" => "||",
                "and" => "&&",
                "in" | "matches" | "contains" | "startsWith" | "endsWith" | "not" => {
                    return self.error(format!(
                        "operator `{word}` is not supported; weir reads ==, !=, <, <=, >, >=, \
                         &&, ||, !, +, -, *, /, %"
                    ));
                }
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        Ok(Some(match op {
            "||" => (BinOp::Or, 1),
            "&&" => (BinOp::And, 2),
            "==" => (BinOp::Eq, 3),
            "!=" => (BinOp::Ne, 3),
            "<" => (BinOp::Lt, 3),
            "<=" => (BinOp::Le, 3),
            ">" => (BinOp::Gt, 3),
            ">=" => (BinOp::Ge, 3),
            "+" => (BinOp::Add, 4),
            "-" => (BinOp::Sub, 4),
            "*" => (BinOp::Mul, 5),
            "/" => (BinOp::Div, 5),
            "%" => (BinOp::Rem, 5),
            other => {
                return self.error(format!(
                    "operator `{other}` is not supported; weir reads ==, !=, <, <=, >, >=, &&, \
                     ||, !, +, -, *, /, %"
                ));
            }
        }))
    }

    fn expression(&mut self, min_precedence: u8) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut left = self.unary()?;
        while let Some((op, precedence)) = self.binary_operator()? {
            if precedence < min_precedence {
                break;
            }
            self.position += 1;
            let right = self.expression(precedence + 1)?;
            left = Expr::Binary(Box::new(left), BinaryOp(op), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        match self.peek() {
            Some(Tok::Op("!")) => {
                self.position += 1;
                self.enter()?;
                let operand = self.unary()?;
                self.depth -= 1;
                Ok(Expr::Not(Box::new(operand)))
            }
            Some(Tok::Ident(word)) if word == "not" => {
                self.position += 1;
                self.enter()?;
                let operand = self.unary()?;
                self.depth -= 1;
                Ok(Expr::Not(Box::new(operand)))
            }
            Some(Tok::Op("-")) => {
                self.position += 1;
                self.enter()?;
                let operand = self.unary()?;
                self.depth -= 1;
                Ok(Expr::Neg(Box::new(operand)))
            }
            Some(Tok::Op("+")) => {
                self.position += 1;
                self.unary()
            }
            _ => self.postfix(),
        }
    }

    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let mut expr = self.primary()?;
        loop {
            match self.peek() {
                Some(Tok::Dot) => {
                    self.position += 1;
                    match self.next() {
                        Some(Tok::Ident(name)) => {
                            if self.peek() == Some(&Tok::LParen) {
                                return self.error(format!(
                                    "method `{name}` is not supported; the functions are {FUNCTIONS}"
                                ));
                            }
                            expr = Expr::Member(Box::new(expr), name);
                        }
                        _ => {
                            self.position = self.position.saturating_sub(1);
                            let found = self.describe_next();
                            return self
                                .error(format!("expected a field name after `.`, found {found}"));
                        }
                    }
                }
                Some(Tok::Op("?.")) => {
                    return self.error("operator `?.` is not supported");
                }
                Some(Tok::LBracket) => {
                    self.position += 1;
                    self.enter()?;
                    let index = self.expression(0)?;
                    self.depth -= 1;
                    if matches!(self.peek(), Some(Tok::Op(":"))) {
                        return self.error("slices (`[a:b]`) are not supported");
                    }
                    self.expect(&Tok::RBracket, "`]`")?;
                    expr = match index {
                        Expr::Literal(Val::Str(name)) => Expr::Member(Box::new(expr), name),
                        index => Expr::Index(Box::new(expr), Box::new(index)),
                    };
                }
                _ => return Ok(expr),
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let offset = self.offset();
        let Some(tok) = self.next() else {
            return self.error("the expression ends where a value is expected");
        };
        match tok {
            Tok::Num(number) => Ok(Expr::Literal(Val::Num(number))),
            Tok::Str(text) => Ok(Expr::Literal(Val::Str(text))),
            Tok::Placeholder(name) => Ok(Expr::Placeholder(name)),
            Tok::Hash => Ok(Expr::Element),
            Tok::Dot => {
                // `.field` inside a predicate: the element's field.
                match self.next() {
                    Some(Tok::Ident(name)) => Ok(Expr::Member(Box::new(Expr::Element), name)),
                    _ => Err(ParseError {
                        offset,
                        message: "expected a field name after `.`".into(),
                    }),
                }
            }
            Tok::LParen => {
                self.enter()?;
                let inner = self.expression(0)?;
                self.depth -= 1;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(inner)
            }
            Tok::LBracket => Err(ParseError {
                offset,
                message: "list literals are not supported".into(),
            }),
            Tok::LBrace => Err(ParseError {
                offset,
                message: "map literals and closures outside `all` are not supported".into(),
            }),
            Tok::Ident(name) => self.identifier(offset, name),
            Tok::Op(op) => Err(ParseError {
                offset,
                message: format!("`{op}` where a value is expected"),
            }),
            other => {
                self.position -= 1;
                let found = self.describe_next();
                let _ = other;
                self.error(format!("{found} where a value is expected"))
            }
        }
    }

    fn identifier(&mut self, offset: usize, name: String) -> Result<Expr, ParseError> {
        let refuse = |message: String| Err(ParseError { offset, message });
        if self.peek() == Some(&Tok::LParen) {
            self.position += 1;
            let func = match name.as_str() {
                "len" => Func::Len,
                "isNaN" => Func::IsNaN,
                "isInf" => Func::IsInf,
                "isNil" => Func::IsNil,
                "default" => Func::Default,
                "asInt" => Func::AsInt,
                "asFloat" => Func::AsFloat,
                "all" => return self.all(),
                other => {
                    return refuse(format!(
                        "function `{other}` is not supported; the functions are {FUNCTIONS}"
                    ));
                }
            };
            let args = self.arguments()?;
            let arity = if func == Func::Default { 2 } else { 1 };
            if args.len() != arity {
                return refuse(format!(
                    "`{name}` takes {arity} argument{}, not {}",
                    if arity == 1 { "" } else { "s" },
                    args.len()
                ));
            }
            return Ok(Expr::Call(BuiltinFn(func), args));
        }
        match name.as_str() {
            "result" => Ok(Expr::Result),
            "true" => Ok(Expr::Literal(Val::Bool(true))),
            "false" => Ok(Expr::Literal(Val::Bool(false))),
            "nil" => Ok(Expr::Literal(Val::Nil)),
            "NaN" => Ok(Expr::Literal(Val::Num(f64::NAN))),
            other => refuse(format!(
                "unknown name `{other}`: an expression reads `result` (and `#` in `all`'s \
                 predicate)"
            )),
        }
    }

    fn arguments(&mut self) -> Result<Vec<Expr>, ParseError> {
        let mut args = Vec::new();
        if self.peek() == Some(&Tok::RParen) {
            self.position += 1;
            return Ok(args);
        }
        self.enter()?;
        loop {
            args.push(self.expression(0)?);
            match self.next() {
                Some(Tok::Comma) => {}
                Some(Tok::RParen) => break,
                _ => {
                    self.position = self.position.saturating_sub(1);
                    let found = self.describe_next();
                    return self.error(format!("expected `,` or `)`, found {found}"));
                }
            }
        }
        self.depth -= 1;
        Ok(args)
    }

    /// `all(list, predicate)`, the `(` read.
    fn all(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let list = self.expression(0)?;
        self.expect(&Tok::Comma, "`,` after all's list")?;
        let predicate = if self.peek() == Some(&Tok::LBrace) {
            self.position += 1;
            let inner = self.expression(0)?;
            self.expect(&Tok::RBrace, "`}` closing the predicate")?;
            inner
        } else {
            self.expression(0)?
        };
        self.expect(&Tok::RParen, "`)` closing all")?;
        self.depth -= 1;
        Ok(Expr::All(Box::new(list), Box::new(predicate)))
    }
}

impl Expr {
    /// Parses `text`, refusing by name what the subset does not read.
    pub fn parse(text: &str) -> Result<Expr, ParseError> {
        if text.len() > MAX_EXPRESSION_BYTES {
            return Err(ParseError {
                offset: 0,
                message: format!("is longer than {MAX_EXPRESSION_BYTES} bytes"),
            });
        }
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens,
            position: 0,
            end: text.len(),
            depth: 0,
        };
        if parser.peek().is_none() {
            return parser.error("is empty");
        }
        let expr = parser.expression(0)?;
        if parser.peek().is_some() {
            let found = parser.describe_next();
            return parser.error(format!("unexpected {found} after the expression"));
        }
        Ok(expr)
    }

    /// The placeholders (`{{ args.x }}`) outside strings, which Argo fills before evaluating.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut found = Vec::new();
        self.walk(&mut |expr| {
            if let Expr::Placeholder(name) = expr {
                found.push(name.as_str());
            }
        });
        found
    }

    fn walk<'a>(&'a self, visit: &mut dyn FnMut(&'a Expr)) {
        visit(self);
        match self {
            Expr::Not(inner) | Expr::Neg(inner) | Expr::Member(inner, _) => inner.walk(visit),
            Expr::Binary(left, _, right) | Expr::Index(left, right) | Expr::All(left, right) => {
                left.walk(visit);
                right.walk(visit);
            }
            Expr::Call(_, args) => args.iter().for_each(|arg| arg.walk(visit)),
            Expr::Literal(_) | Expr::Result | Expr::Element | Expr::Placeholder(_) => {}
        }
    }

    /// Evaluates the expression with `result` bound to `result`.
    pub fn evaluate(&self, result: &Val) -> Result<Val, EvalError> {
        self.eval(result, None, 0)
    }

    /// Evaluates a condition: Argo requires a boolean.
    pub fn evaluate_bool(&self, result: &Val) -> Result<bool, EvalError> {
        match self.evaluate(result)? {
            Val::Bool(flag) => Ok(flag),
            other => Err(EvalError(format!(
                "expected a boolean, the condition gave a {}",
                other.type_name()
            ))),
        }
    }

    fn eval(&self, result: &Val, element: Option<&Val>, depth: usize) -> Result<Val, EvalError> {
        if depth > MAX_DEPTH * 4 {
            return Err(EvalError("the expression is nested too deep".into()));
        }
        let depth = depth + 1;
        Ok(match self {
            Expr::Literal(value) => value.clone(),
            Expr::Result => result.clone(),
            Expr::Element => match element {
                Some(value) => value.clone(),
                None => return Err(EvalError("`#` is only defined inside all(...)".into())),
            },
            Expr::Placeholder(name) => {
                return Err(EvalError(format!(
                    "the placeholder {{{{{name}}}}} was not resolved"
                )));
            }
            Expr::Not(inner) => match inner.eval(result, element, depth)? {
                Val::Bool(flag) => Val::Bool(!flag),
                other => {
                    return Err(EvalError(format!(
                        "`!` needs a boolean, not a {}",
                        other.type_name()
                    )));
                }
            },
            Expr::Neg(inner) => match inner.eval(result, element, depth)? {
                Val::Num(number) => Val::Num(-number),
                other => {
                    return Err(EvalError(format!(
                        "`-` needs a number, not a {}",
                        other.type_name()
                    )));
                }
            },
            Expr::Binary(left, BinaryOp(op), right) => {
                binary(*op, left, right, result, element, depth)?
            }
            Expr::Member(inner, name) => match inner.eval(result, element, depth)? {
                Val::Map(map) => map.get(name).cloned().unwrap_or(Val::Nil),
                other => {
                    return Err(EvalError(format!(
                        "cannot read field {name:?} of a {}",
                        other.type_name()
                    )));
                }
            },
            Expr::Index(inner, index) => {
                let container = inner.eval(result, element, depth)?;
                let index = index.eval(result, element, depth)?;
                match (container, index) {
                    (Val::List(items), Val::Num(number)) => {
                        if number.fract() != 0.0 || !number.is_finite() {
                            return Err(EvalError(format!("index {number} is not an integer")));
                        }
                        let length = items.len() as f64;
                        let position = if number < 0.0 {
                            length + number
                        } else {
                            number
                        };
                        if position < 0.0 || position >= length {
                            return Err(EvalError(format!(
                                "index out of range: {number} (length {})",
                                items.len()
                            )));
                        }
                        items.into_iter().nth(position as usize).unwrap_or(Val::Nil)
                    }
                    (Val::Map(map), Val::Str(key)) => map.get(&key).cloned().unwrap_or(Val::Nil),
                    (container, index) => {
                        return Err(EvalError(format!(
                            "cannot index a {} with a {}",
                            container.type_name(),
                            index.type_name()
                        )));
                    }
                }
            }
            Expr::Call(BuiltinFn(func), args) => {
                let mut values = Vec::with_capacity(args.len());
                for arg in args {
                    values.push(arg.eval(result, element, depth)?);
                }
                call(*func, values)?
            }
            Expr::All(list, predicate) => match list.eval(result, element, depth)? {
                Val::List(items) => {
                    for item in &items {
                        match predicate.eval(result, Some(item), depth)? {
                            Val::Bool(true) => {}
                            Val::Bool(false) => return Ok(Val::Bool(false)),
                            other => {
                                return Err(EvalError(format!(
                                    "all's predicate gave a {}, not a boolean",
                                    other.type_name()
                                )));
                            }
                        }
                    }
                    Val::Bool(true)
                }
                other => {
                    return Err(EvalError(format!(
                        "all needs a list, not a {}",
                        other.type_name()
                    )));
                }
            },
        })
    }
}

fn binary(
    op: BinOp,
    left: &Expr,
    right: &Expr,
    result: &Val,
    element: Option<&Val>,
    depth: usize,
) -> Result<Val, EvalError> {
    // `||` and `&&` short-circuit, as expr does: `len(result) == 0 || result[0] < 1`.
    if matches!(op, BinOp::Or | BinOp::And) {
        let left = match left.eval(result, element, depth)? {
            Val::Bool(flag) => flag,
            other => {
                return Err(EvalError(format!(
                    "`||` and `&&` need booleans, not a {}",
                    other.type_name()
                )));
            }
        };
        if (op == BinOp::Or && left) || (op == BinOp::And && !left) {
            return Ok(Val::Bool(left));
        }
        return match right.eval(result, element, depth)? {
            Val::Bool(flag) => Ok(Val::Bool(flag)),
            other => Err(EvalError(format!(
                "`||` and `&&` need booleans, not a {}",
                other.type_name()
            ))),
        };
    }
    let left = left.eval(result, element, depth)?;
    let right = right.eval(result, element, depth)?;
    let mismatch = |symbol: &str, left: &Val, right: &Val| {
        EvalError(format!(
            "invalid operation: {} {symbol} {}",
            left.type_name(),
            right.type_name()
        ))
    };
    Ok(match op {
        BinOp::Eq => Val::Bool(equal(&left, &right)),
        BinOp::Ne => Val::Bool(!equal(&left, &right)),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let symbol = match op {
                BinOp::Lt => "<",
                BinOp::Le => "<=",
                BinOp::Gt => ">",
                _ => ">=",
            };
            let ordering = match (&left, &right) {
                (Val::Num(a), Val::Num(b)) => a.partial_cmp(b),
                (Val::Str(a), Val::Str(b)) => Some(a.cmp(b)),
                _ => return Err(mismatch(symbol, &left, &right)),
            };
            // NaN compares false with everything, as in Go.
            Val::Bool(ordering.is_some_and(|ordering| match op {
                BinOp::Lt => ordering.is_lt(),
                BinOp::Le => ordering.is_le(),
                BinOp::Gt => ordering.is_gt(),
                _ => ordering.is_ge(),
            }))
        }
        BinOp::Add => match (&left, &right) {
            (Val::Num(a), Val::Num(b)) => Val::Num(a + b),
            (Val::Str(a), Val::Str(b)) => Val::Str(format!("{a}{b}")),
            _ => return Err(mismatch("+", &left, &right)),
        },
        BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
            let (Val::Num(a), Val::Num(b)) = (&left, &right) else {
                let symbol = match op {
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                    _ => "%",
                };
                return Err(mismatch(symbol, &left, &right));
            };
            match op {
                BinOp::Sub => Val::Num(a - b),
                BinOp::Mul => Val::Num(a * b),
                BinOp::Div => Val::Num(a / b),
                _ => {
                    if *b == 0.0 {
                        return Err(EvalError("integer divide by zero".into()));
                    }
                    Val::Num(a % b)
                }
            }
        }
        BinOp::Or | BinOp::And => Val::Nil,
    })
}

fn equal(left: &Val, right: &Val) -> bool {
    match (left, right) {
        (Val::Num(a), Val::Num(b)) => a == b,
        (Val::List(a), Val::List(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| equal(a, b))
        }
        (Val::Map(a), Val::Map(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && equal(va, vb))
        }
        (a, b) => a == b,
    }
}

fn call(func: Func, mut args: Vec<Val>) -> Result<Val, EvalError> {
    let first = if args.is_empty() {
        Val::Nil
    } else {
        args.remove(0)
    };
    Ok(match func {
        Func::Len => match &first {
            Val::List(items) => Val::Num(items.len() as f64),
            Val::Map(map) => Val::Num(map.len() as f64),
            Val::Str(text) => Val::Num(text.chars().count() as f64),
            other => {
                return Err(EvalError(format!(
                    "invalid argument for len (type {})",
                    other.type_name()
                )));
            }
        },
        Func::IsNaN => match first {
            Val::Num(number) => Val::Bool(number.is_nan()),
            other => {
                return Err(EvalError(format!(
                    "isNaN needs a number, not a {}",
                    other.type_name()
                )));
            }
        },
        Func::IsInf => match first {
            Val::Num(number) => Val::Bool(number.is_infinite()),
            other => {
                return Err(EvalError(format!(
                    "isInf needs a number, not a {}",
                    other.type_name()
                )));
            }
        },
        Func::IsNil => Val::Bool(first == Val::Nil),
        Func::Default => {
            if first == Val::Nil {
                args.into_iter().next().unwrap_or(Val::Nil)
            } else {
                first
            }
        }
        Func::AsInt => match first {
            Val::Num(number) if number.is_finite() => Val::Num(number.trunc()),
            Val::Str(text) => match text.trim().parse::<i64>() {
                Ok(number) => Val::Num(number as f64),
                Err(_) => return Err(EvalError(format!("asInt: {text:?} is not an integer"))),
            },
            other => {
                return Err(EvalError(format!(
                    "asInt needs a number or a numeric string, not a {}",
                    other.type_name()
                )));
            }
        },
        Func::AsFloat => match first {
            Val::Num(number) => Val::Num(number),
            Val::Str(text) => match text.trim().parse::<f64>() {
                Ok(number) => Val::Num(number),
                Err(_) => return Err(EvalError(format!("asFloat: {text:?} is not a number"))),
            },
            other => {
                return Err(EvalError(format!(
                    "asFloat needs a number or a numeric string, not a {}",
                    other.type_name()
                )));
            }
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use proptest::strategy::Strategy as _;
    use serde_json::json;

    use super::*;

    fn eval(expression: &str, result: Value) -> Result<bool, String> {
        let parsed = Expr::parse(expression).map_err(|error| error.to_string())?;
        parsed
            .evaluate_bool(&Val::from_json(&result))
            .map_err(|error| error.to_string())
    }

    #[test]
    fn the_forms_the_examples_use_evaluate_against_json() {
        assert_eq!(eval("result[0] >= 0.95", json!([0.97])), Ok(true));
        assert_eq!(eval("result[0] >= 0.95", json!([0.9])), Ok(false));
        assert_eq!(eval("result < 5", json!(3)), Ok(true));
        assert_eq!(eval("result >= 0.95", json!(0.95)), Ok(true));
        assert_eq!(
            eval("len(result) == 0 || result[0] < 1", json!([])),
            Ok(true)
        );
        assert_eq!(
            eval("len(result) == 0 || result[0] < 1", json!([2])),
            Ok(false)
        );
        assert_eq!(
            eval("len(result) > 0 && result[0] >= 0.95", json!([])),
            Ok(false)
        );
        assert_eq!(
            eval("result.foo == \"bar\"", json!({"foo": "bar"})),
            Ok(true)
        );
        assert_eq!(eval("result.major == '1'", json!({"major": "1"})), Ok(true));
        assert_eq!(eval("result.Status == -1", json!({"Status": -1})), Ok(true));
        assert_eq!(
            eval("result == 'It worked!'", json!("It worked!")),
            Ok(true)
        );
        assert_eq!(eval("result == true", json!(true)), Ok(true));
        assert_eq!(eval("result == \"true\"", json!(true)), Ok(false));
        assert_eq!(eval("default(result, 0) < 10", json!(null)), Ok(true));
        assert_eq!(eval("default(result, 0) < 10", json!(12)), Ok(false));
        assert_eq!(eval("asInt(result) == 3", json!("3")), Ok(true));
        assert_eq!(eval("asFloat(result) > 0.5", json!("0.75")), Ok(true));
        assert_eq!(eval("all(result, # < 1000)", json!([1, 999])), Ok(true));
        assert_eq!(eval("all(result, # < 1000)", json!([1, 1000])), Ok(false));
        assert_eq!(
            eval(
                "len(result[0].Values) >= 5 and all(result[0].Values, {# <= 0.01})",
                json!([{"Values": [0.0, 0.01, 0.0, 0.001, 0.0]}])
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                "all(result.service_apdex.values.values, {asFloat(.value) >= 9900})",
                json!({"service_apdex": {"values": {"values": [{"value": "9950"}, {"value": 9901}]}}})
            ),
            Ok(true)
        );
        assert_eq!(eval("not (result > 1)", json!(0)), Ok(true));
        assert_eq!(eval("result[\"a-b\"] == 2", json!({"a-b": 2})), Ok(true));
    }

    #[test]
    fn nan_and_inf_are_values() {
        let parsed = Expr::parse("isNaN(result) || result >= 0.95").unwrap();
        assert_eq!(parsed.evaluate_bool(&Val::Num(f64::NAN)), Ok(true));
        assert_eq!(parsed.evaluate_bool(&Val::Num(0.5)), Ok(false));
        let inf = Expr::parse("isInf(result)").unwrap();
        assert_eq!(inf.evaluate_bool(&Val::Num(f64::INFINITY)), Ok(true));
        // NaN compares false, as in Go.
        let compare = Expr::parse("result >= 0.95").unwrap();
        assert_eq!(compare.evaluate_bool(&Val::Num(f64::NAN)), Ok(false));
    }

    #[test]
    fn evaluation_errors_are_errors_not_panics() {
        assert!(eval("result[0] >= 0.95", json!([])).is_err());
        assert!(eval("result[0] >= 0.95", json!(1)).is_err());
        assert!(eval("result < 5", json!("x")).is_err());
        assert!(eval("result", json!(1)).is_err());
        assert!(eval("asInt(result) > 1", json!("abc")).is_err());
        assert!(eval("result.a.b == 1", json!(null)).is_err());
        assert!(eval("result % 0 == 1", json!(3)).is_err());
        assert!(eval("{{ args.max }} > 1", json!(3)).is_err());
    }

    #[test]
    fn what_is_beyond_the_subset_is_refused_by_name() {
        let refused = |text: &str| Expr::parse(text).unwrap_err().message;
        assert!(refused("results[0] >= 90").contains("unknown name `results`"));
        assert!(refused("filter(result, # > 1)").contains("function `filter`"));
        assert!(refused("result matches 'a.*'").contains("operator `matches`"));
        assert!(refused("result in [1, 2]").contains("operator `in`"));
        assert!(refused("result ?? 1").contains("operator `??`"));
        assert!(refused("result > 1 ? true : false").contains("operator `?`"));
        assert!(refused("result.size()").contains("method `size`"));
        assert!(refused("").contains("empty"));
        assert!(refused("result >").contains("ends"));
        assert!(refused("(result").contains("`)`"));
        assert!(refused("'open").contains("closing quote"));
    }

    #[test]
    fn placeholders_parse_and_are_listed() {
        let parsed = Expr::parse("default(result, 0) > {{ args.restarts.max-restarts }}").unwrap();
        assert_eq!(parsed.placeholders(), vec!["args.restarts.max-restarts"]);
        let quoted = Expr::parse("result == \"{{args.success-condition}}\"").unwrap();
        assert!(quoted.placeholders().is_empty());
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_read_or_refused_without_panicking(text in "\\PC{0,200}") {
            if let Ok(parsed) = Expr::parse(&text) {
                let _ = parsed.evaluate(&Val::List(vec![Val::Num(1.0)]));
            }
        }

        #[test]
        fn expression_like_text_is_read_or_refused_without_panicking(
            text in "(result|len|all|default|asInt|isNaN|nil|true|[0-9.]{1,4}|'a'|#|[.,()\\[\\]{}<>=!&|+*/% -]){0,40}",
            value in proptest::prop_oneof![
                proptest::strategy::Just(Val::Nil),
                (-10.0f64..10.0).prop_map(Val::Num),
                proptest::strategy::Just(Val::List(vec![Val::Num(0.5), Val::Str("x".into())])),
            ],
        ) {
            if let Ok(parsed) = Expr::parse(&text) {
                let _ = parsed.evaluate(&value);
            }
        }
    }

    #[test]
    fn deep_or_long_input_is_refused_without_overflow() {
        let deep = format!("{}result{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(Expr::parse(&deep).is_err());
        let nots = format!("{}true", "!".repeat(10_000));
        assert!(Expr::parse(&nots).is_err());
        let long = "1 + ".repeat(2000) + "1";
        assert!(Expr::parse(&long).is_err());
        let chained = "result".to_string() + &"[0]".repeat(1000);
        // Postfix chains are not nested recursion in the parser; evaluation is bounded.
        if let Ok(parsed) = Expr::parse(&chained) {
            assert!(parsed.evaluate(&Val::Nil).is_err());
        }
    }
}
