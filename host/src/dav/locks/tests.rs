//! The lock table's bounds and owners, without HTTP.
use super::*;

fn lock(tenant: &str, file: &str, exclusive: bool) -> Lock {
    Lock {
        tenant: tenant.to_owned(),
        principal: "alice".to_owned(),
        instance: "run1".to_owned(),
        path: SandboxView {
            area: "workspace",
            segments: vec![file.to_owned()],
        },
        href: String::new(),
        token: format!("opaquelocktoken:{tenant}-{file}"),
        owner: None,
        exclusive,
        infinite: false,
        timeout: MAX_TIMEOUT,
        expires: Instant::now() + MAX_TIMEOUT,
    }
}

/// [`lock`], taken by `principal`.
fn lock_of(principal: String, tenant: &str, file: &str) -> Lock {
    Lock {
        principal,
        ..lock(tenant, file, false)
    }
}

fn status(granted: Result<(), Refusal>) -> u16 {
    granted.err().map_or(200, |(status, _)| status.as_u16())
}

#[test]
fn owners_are_clipped_at_a_character_boundary() {
    assert_eq!(clipped("alice".to_owned()), "alice");
    let long = "é".repeat(MAX_OWNER_BYTES);
    let kept = clipped(long);
    assert_eq!(kept.len(), MAX_OWNER_BYTES);
    assert_eq!(
        clipped(format!("x{}", "é".repeat(200))).len(),
        MAX_OWNER_BYTES - 1
    );
}

#[test]
fn one_resource_takes_a_bounded_number_of_shared_locks() {
    let table = LockTable::default();
    for _ in 0..MAX_SHARED_LOCKS {
        assert_eq!(status(table.grant(&lock("chem", "f", false), &[])), 200);
    }
    let (code, why) = table.grant(&lock("chem", "f", false), &[]).unwrap_err();
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(why.contains("16 shared locks"), "{why}");
    assert_eq!(status(table.grant(&lock("chem", "f", true), &[])), 423);
    assert_eq!(status(table.grant(&lock("chem", "g", false), &[])), 200);
    assert_eq!(status(table.grant(&lock("bio", "f", false), &[])), 200);
}

#[test]
fn one_tenant_cannot_fill_the_table_for_the_others() {
    let table = LockTable::default();
    for i in 0..MAX_TENANT_LOCKS {
        let new = lock_of(format!("p{}", i % 4), "bio", &i.to_string());
        assert_eq!(status(table.grant(&new, &[])), 200);
    }
    let (code, why) = table.grant(&lock("bio", "more", true), &[]).unwrap_err();
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(why.contains("tenant `bio` holds 1000 locks"), "{why}");
    assert_eq!(status(table.grant(&lock("chem", "mine", true), &[])), 200);
}

#[test]
fn one_principal_cannot_fill_its_tenants_table() {
    let table = LockTable::default();
    for i in 0..MAX_PRINCIPAL_LOCKS {
        let new = lock_of("alice".to_owned(), "chem", &i.to_string());
        assert_eq!(status(table.grant(&new, &[])), 200);
    }
    let (code, why) = (table.grant(&lock_of("alice".to_owned(), "chem", "more"), &[])).unwrap_err();
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(why.contains("`alice` holds 250 locks"), "{why}");
    let carol = lock_of("carol".to_owned(), "chem", "mine");
    assert_eq!(status(table.grant(&carol, &[])), 200);
}

#[test]
fn tenants_together_cannot_fill_the_table_for_another() {
    let table = LockTable::default();
    for tenant in 0..12 {
        for i in 0..MAX_TENANT_LOCKS {
            let new = lock_of(format!("p{}", i % 4), &format!("t{tenant}"), &i.to_string());
            assert_eq!(status(table.grant(&new, &[])), 200);
        }
    }
    assert_eq!(status(table.grant(&lock("chem", "mine", true), &[])), 200);
}
