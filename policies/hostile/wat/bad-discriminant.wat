;; A core module implementing the `policy` world by hand, so that `evaluate` can return what no
;; well-behaved guest can: a decision whose variant discriminant is 7 (the variant has 3 cases).
;; The tests' build script embeds the world's type information and wraps it into a component.
(module
  (memory (export "memory") 1)
  (global $next (mut i32) (i32.const 4096))
  ;; A bump allocator is enough: each instance is used for one evaluation.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $ptr i32)
    (local.set $ptr (global.get $next))
    (global.set $next (i32.add (global.get $next) (local.get 3)))
    (local.get $ptr))
  ;; configure(settings) -> result<_, string>: return a pointer to Ok (discriminant 0).
  (func (export "configure") (param i32 i32) (result i32)
    (i32.store8 (i32.const 1024) (i32.const 0))
    (i32.const 1024))
  ;; evaluate(call) -> decision: return a pointer to discriminant 7.
  (func (export "evaluate") (param i32) (result i32)
    (i32.store8 (i32.const 2048) (i32.const 7))
    (i32.const 2048))
)
