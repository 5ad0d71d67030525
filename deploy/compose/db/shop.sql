-- The site's example schema, made on the origin and on each target at their first start
-- (binlogsync carries changes, not the initial schema: README "What the target needs").
CREATE DATABASE IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.customers (
    id INT PRIMARY KEY,
    name VARCHAR(100) NOT NULL,
    balance DECIMAL(12, 2) NOT NULL DEFAULT 0,
    updated_at DATETIME(6) NOT NULL
);
CREATE TABLE IF NOT EXISTS shop.orders (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    customer_id INT NOT NULL,
    amount DECIMAL(12, 2) NOT NULL,
    note VARCHAR(200) NULL,
    created_at DATETIME(6) NOT NULL
);
