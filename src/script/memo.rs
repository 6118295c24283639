//! `ctx.memo`: a map a script keeps between calls, per object, in memory.
//!
//! Every call about one object (its reconciles, handlers, timers and daemon ticks) sees the same
//! memo, so a value a handler stores is there for the next call. Memos live in khai's memory
//! only: a restart (or another replica taking over) starts them afresh from the operator's memo,
//! which the `startup` hook fills. An object's memo goes when the object does.
//!
//! Scripts read and write it as a map: `ctx.memo.count = 1`, `ctx.memo["key"]`,
//! `"key" in ctx.memo`, `ctx.memo.remove("key")`. A memo holds at most [`MAX_KEYS`] keys.

use rhai::{Dynamic, Engine, EvalAltResult, Map, Position};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Keys one memo may hold.
pub(crate) const MAX_KEYS: usize = 1024;

/// One memo, shared by every call about its object.
#[derive(Clone, Default)]
pub struct Memo(Arc<Mutex<Map>>);

impl Memo {
    /// A memo starting with `initial`'s keys.
    pub(crate) fn from_map(initial: Map) -> Self {
        Self(Arc::new(Mutex::new(initial)))
    }

    /// A copy of what it holds.
    pub(crate) fn snapshot(&self) -> Map {
        crate::sync::lock(&self.0).clone()
    }

    fn get(&mut self, key: &str) -> Dynamic {
        crate::sync::lock(&self.0)
            .get(key)
            .cloned()
            .unwrap_or(Dynamic::UNIT)
    }

    fn set(&mut self, key: &str, value: Dynamic) -> Result<(), Box<EvalAltResult>> {
        // A memo outlives the call and is dropped off the script stack: no deeper than a
        // result may be (see `convert`).
        if let Err(e) = crate::nesting::check(&value) {
            crate::nesting::dismantle(value);
            return Err(Box::new(EvalAltResult::ErrorRuntime(
                format!("ctx.memo.{key}: {e}").into(),
                Position::NONE,
            )));
        }
        let mut m = crate::sync::lock(&self.0);
        if m.len() >= MAX_KEYS && !m.contains_key(key) {
            return Err(Box::new(EvalAltResult::ErrorRuntime(
                format!("ctx.memo holds at most {MAX_KEYS} keys").into(),
                Position::NONE,
            )));
        }
        m.insert(key.into(), value);
        Ok(())
    }
}

/// Registers the `Memo` type: indexing, property access, `in`, `remove`, `keys`, `len`.
pub(crate) fn register(engine: &mut Engine) {
    engine
        .register_type_with_name::<Memo>("Memo")
        .register_indexer_get(|m: &mut Memo, key: &str| m.get(key))
        .register_indexer_set(|m: &mut Memo, key: &str, v: Dynamic| m.set(key, v))
        .register_fn("contains", |m: &mut Memo, key: &str| {
            crate::sync::lock(&m.0).contains_key(key)
        })
        .register_fn("remove", |m: &mut Memo, key: &str| {
            crate::sync::lock(&m.0).remove(key).unwrap_or(Dynamic::UNIT)
        })
        .register_fn("keys", |m: &mut Memo| -> rhai::Array {
            crate::sync::lock(&m.0)
                .keys()
                .map(|k| Dynamic::from(k.clone()))
                .collect()
        })
        .register_fn("len", |m: &mut Memo| {
            i64::try_from(crate::sync::lock(&m.0).len()).unwrap_or(i64::MAX)
        })
        .register_fn("to_map", |m: &mut Memo| m.snapshot());
}

/// The memos of every object, by uid, and the operator's memo each new one starts from.
#[derive(Default)]
pub(crate) struct Memos {
    objects: Mutex<HashMap<String, Memo>>,
    operator: Memo,
}

impl Memos {
    /// The operator's memo (what the `startup` hook sees).
    pub(crate) fn operator(&self) -> Memo {
        self.operator.clone()
    }

    /// The memo of the object with `uid`, made from the operator's memo on first use.
    pub(crate) fn of(&self, uid: &str) -> Memo {
        crate::sync::lock(&self.objects)
            .entry(uid.to_string())
            .or_insert_with(|| Memo::from_map(self.operator.snapshot()))
            .clone()
    }

    /// Forgets the memo of `uid`, whose object is gone.
    pub(crate) fn forget(&self, uid: &str) {
        crate::sync::lock(&self.objects).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(memo: &Memo, src: &str) -> Dynamic {
        let mut e = Engine::new();
        register(&mut e);
        let mut scope = rhai::Scope::new();
        scope.push("memo", memo.clone());
        e.eval_with_scope::<Dynamic>(&mut scope, src).unwrap()
    }

    #[test]
    fn a_memo_keeps_what_a_script_stores_for_the_next_call() {
        let memos = Memos::default();
        let m = memos.of("u1");
        let _ = eval(&m, "memo.count = 1; memo[\"name\"] = \"a\";");
        let again = memos.of("u1");
        assert_eq!(eval(&again, "memo.count + 1").as_int().unwrap(), 2);
        assert_eq!(eval(&again, "memo.name").into_string().unwrap(), "a");
        assert!(eval(&again, "memo.missing").is_unit());
        assert!(eval(&again, "memo.contains(\"count\")").as_bool().unwrap());
        assert_eq!(eval(&again, "memo.keys().len()").as_int().unwrap(), 2);
        memos.forget("u1");
        assert!(
            eval(&memos.of("u1"), "memo.count").is_unit(),
            "a new object starts afresh"
        );
    }

    #[test]
    fn new_memos_start_from_the_operators() {
        let memos = Memos::default();
        let _ = eval(&memos.operator(), "memo.region = \"eu\"");
        assert_eq!(
            eval(&memos.of("u2"), "memo.region").into_string().unwrap(),
            "eu"
        );
    }

    #[test]
    fn a_memo_is_bounded() {
        let m = Memo::default();
        let mut e = Engine::new();
        register(&mut e);
        let mut scope = rhai::Scope::new();
        scope.push("memo", m);
        let err = e
            .eval_with_scope::<Dynamic>(&mut scope, "for i in 0..2000 { memo[`k${i}`] = i; }")
            .unwrap_err();
        assert!(err.to_string().contains("at most 1024 keys"), "{err}");
    }
}
