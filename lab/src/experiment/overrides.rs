//! A variant's `name = value` parameter overrides, applied to a scenario's typed parameters and
//! checked against their type.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Applies `name = value` overrides to serialised parameters and reads them back, so every
/// name and value is checked against the parameter type. Dotted names reach into nested
/// tables. A value is taken as JSON (`true`, `4`, `[1,2]`) when that fits the field, else as a
/// string (`cross-llc`).
pub(crate) fn apply_overrides<P: Serialize + DeserializeOwned>(
    params: &P,
    overrides: &BTreeMap<String, String>,
) -> Result<P> {
    let mut value = serde_json::to_value(params)?;
    for (name, text) in overrides {
        let candidates = serde_json::from_str::<Value>(text)
            .ok()
            .into_iter()
            .chain([Value::String(text.clone())]);
        let mut first_error = None;
        let mut accepted = None;
        for candidate in candidates {
            let mut trial = value.clone();
            set_path(&mut trial, name, candidate)?;
            match serde_json::from_value::<P>(trial.clone()) {
                Ok(_) => {
                    accepted = Some(trial);
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match accepted {
            Some(v) => value = v,
            None => bail!(
                "parameter {name} = {text:?}: {}",
                first_error.map(|e| e.to_string()).unwrap_or_default()
            ),
        }
    }
    serde_json::from_value(value).context("reading the parameters back")
}

/// Replaces the value at dotted `name`; the name must exist.
fn set_path(root: &mut Value, name: &str, new: Value) -> Result<()> {
    let mut slot = root;
    let mut path = String::new();
    for part in name.split('.') {
        let table = slot
            .as_object_mut()
            .with_context(|| format!("no parameter {name:?}: {path} is a value, not a table"))?;
        let known: Vec<String> = table.keys().cloned().collect();
        slot = table.get_mut(part).with_context(|| {
            let of = if path.is_empty() {
                String::new()
            } else {
                format!(" of {path}")
            };
            format!(
                "no parameter {name:?} (parameters{of}: {})",
                known.join(", ")
            )
        })?;
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
    }
    *slot = new;
    Ok(())
}
