-- Ownership of a conversation among the nodes sharing this database: the node running its
-- actor holds a lease that it renews while the conversation is live. `lease_epoch` grows with
-- every take-over and is checked by the statement that assigns `seq`, so a node whose lease
-- was taken over can't store anything more for the conversation.
alter table session_info
    add column lease_node       text,
    add column lease_epoch      bigint not null default 0,
    add column lease_expires_at timestamptz;
