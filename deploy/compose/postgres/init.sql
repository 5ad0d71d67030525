-- The PostgreSQL target's copy of the site's schema (deploy/compose/db/shop.sql in
-- PostgreSQL's types: docs/targets.md), owned by the agent's account, which also needs CREATE
-- on the database for its own schema `binlogsync` (checkpoint and table definitions).
GRANT CREATE ON DATABASE postgres TO binlogsync;
CREATE SCHEMA shop AUTHORIZATION binlogsync;
CREATE TABLE shop.customers (
    id integer PRIMARY KEY,
    name varchar(100) NOT NULL,
    balance numeric(12, 2) NOT NULL DEFAULT 0,
    updated_at timestamp(6) NOT NULL
);
CREATE TABLE shop.orders (
    id bigint PRIMARY KEY,
    customer_id integer NOT NULL,
    amount numeric(12, 2) NOT NULL,
    note varchar(200),
    created_at timestamp(6) NOT NULL
);
ALTER TABLE shop.customers OWNER TO binlogsync;
ALTER TABLE shop.orders OWNER TO binlogsync;
