//! Shares and share links in the store, on both engines: a link's use and the share it gives
//! are one write (a failed share uses none of it, concurrent uses never pass its limit), and
//! the conversations shared with a principal are read with their rows, a bounded number.

use std::sync::Arc;

use agentmux::protocol::{Principal, Role};
use agentmux::store::Store;
use agentmux::store::links::LinkRow;

use crate::common::refuse_rows;
use crate::store::{Fixture, new_session, on_both_engines, prompt};

on_both_engines!(
    a_links_use_and_its_share_are_one_write,
    conversations_shared_with_a_principal_come_with_their_rows,
);

/// A link `id` to conversation `row` of Alice's `plan`, good for an hour and `max_uses`.
fn link(id: &str, row: agentmux::store::RowId, role: Role, max_uses: Option<i64>) -> LinkRow {
    let now = chrono::Utc::now();
    let at =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    LinkRow {
        id: id.into(),
        row,
        owner: Principal::new("alice"),
        agent_id: agentmux::protocol::AgentId::parse("plan").unwrap(),
        role,
        hash: "0".repeat(64),
        created_at: at(now),
        expires_at: at(now + chrono::Duration::hours(1)),
        max_uses,
        uses: 0,
    }
}

fn now() -> String {
    agentmux::protocol::now_rfc3339()
}

async fn a_links_use_and_its_share_are_one_write(fx: Fixture) {
    let store = fx.open().await;
    let plan = store
        .create_session(new_session("alice", "plan"))
        .await
        .unwrap();
    store
        .put_link(&link("l1", plan.row, Role::Viewer, Some(3)))
        .await
        .unwrap();

    // A share that can't be written uses none of the link.
    let sql = fx.sql().await;
    refuse_rows(&sql, "shares", "true", true).await;
    let failed = store
        .redeem_link("l1", &now(), &Principal::new("bob"))
        .await;
    assert!(failed.is_err(), "{failed:?}");
    refuse_rows(&sql, "shares", "", false).await;
    assert_eq!(store.find_link("l1").await.unwrap().unwrap().uses, 0);
    assert!(store.shares_of(plan.row).await.unwrap().is_empty());

    // Twelve at once on a link of three uses: three get a share, and it counts three.
    let redeemed = futures_util::future::join_all((0..12).map(|i| {
        let store: Arc<dyn Store> = store.clone();
        async move {
            let who = Principal::from(format!("p{i}"));
            store.redeem_link("l1", &now(), &who).await.unwrap()
        }
    }))
    .await;
    let given: Vec<_> = redeemed.into_iter().flatten().collect();
    assert_eq!(given.len(), 3, "{given:?}");
    assert!(
        given
            .iter()
            .all(|s| s.role == Role::Viewer && s.row == plan.row)
    );
    assert_eq!(store.find_link("l1").await.unwrap().unwrap().uses, 3);
    assert_eq!(store.shares_of(plan.row).await.unwrap().len(), 3);

    // A share already there keeps the greater role, and its alias.
    let bob = Principal::new("bob");
    store
        .put_link(&link("l2", plan.row, Role::Editor, None))
        .await
        .unwrap();
    store
        .put_link(&link("l3", plan.row, Role::Viewer, None))
        .await
        .unwrap();
    let editor = store
        .redeem_link("l2", &now(), &bob)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(editor.role, Role::Editor);
    let still = store
        .redeem_link("l3", &now(), &bob)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((still.role, &still.alias), (Role::Editor, &editor.alias));
    // An expired link gives nothing and counts nothing.
    let late = "2999-01-01T00:00:00.000Z";
    assert_eq!(store.redeem_link("l3", late, &bob).await.unwrap(), None);
    assert_eq!(store.find_link("l3").await.unwrap().unwrap().uses, 1);
}

async fn conversations_shared_with_a_principal_come_with_their_rows(fx: Fixture) {
    let store = fx.open().await;
    let bob = Principal::new("bob");
    let mut rows = Vec::new();
    for name in ["one", "two", "three"] {
        let record = store
            .create_session(new_session("alice", name))
            .await
            .unwrap();
        store.append(record.row, vec![prompt(name)]).await.unwrap();
        store
            .put_share(record.row, &bob, Role::Viewer)
            .await
            .unwrap();
        rows.push(record.row);
    }
    // Neither another principal's share nor a conversation whose import is not finished.
    let others = store
        .create_session(new_session("carol", "other"))
        .await
        .unwrap();
    store
        .put_share(others.row, &Principal::new("dave"), Role::Editor)
        .await
        .unwrap();
    let pending = store
        .begin_import(new_session("carol", "importing"))
        .await
        .unwrap();
    store
        .put_share(pending.row, &bob, Role::Editor)
        .await
        .unwrap();

    let shared = store.shared_with(&bob, 10).await.unwrap();
    let seen: Vec<_> = shared
        .iter()
        .map(|(share, record)| {
            (
                share.row,
                record.row,
                share.owner.as_str(),
                record.agent_id.as_str(),
                record.title.as_deref(),
                record.message_count,
            )
        })
        .collect();
    let names = ["one", "two", "three"];
    let want: Vec<_> = rows
        .iter()
        .zip(names)
        .map(|(row, name)| (*row, *row, "alice", name, Some(name), 1))
        .collect();
    // Shares made within the same millisecond keep no order between them.
    let mut sorted = seen.clone();
    sorted.sort_by_key(|s| s.0.0);
    assert_eq!(sorted, want);
    assert!(shared.iter().all(|(s, _)| s.alias.is_share_alias()));
    // At most as many as asked, the first shared first.
    let two = store.shared_with(&bob, 2).await.unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(
        two.iter().map(|(s, _)| s.row).collect::<Vec<_>>(),
        seen[..2].iter().map(|s| s.0).collect::<Vec<_>>()
    );
    assert!(
        store
            .shared_with(&Principal::new("nobody"), 10)
            .await
            .unwrap()
            .is_empty()
    );
}
