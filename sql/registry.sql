-- The ilargi_db model registry: lives in the database itself, schema `ilargi`.
-- ilargi_db.install(con) runs this file when part of the registry is missing
-- (every statement is idempotent and never replaces an existing object; install
-- first checks that objects with these names are exactly these, and refuses
-- to use a schema `ilargi` whose tables or view are someone else's).
-- Each ilargi_train call adds one row to ilargi.models (a new version of the
-- name); the newest version is the current one. JSON columns hold what a
-- client needs to rebuild the model; the N_predict macros read only
-- ilargi.category_weights and ilargi.tree_leaves, so they work from any DuckDB client.

CREATE SCHEMA IF NOT EXISTS ilargi;

CREATE TABLE IF NOT EXISTS ilargi.models (
    name           VARCHAR   NOT NULL,  -- a plain identifier, lower case
    version        INTEGER   NOT NULL,  -- 1, 2, ... per name; the largest is current
    algorithm      VARCHAR   NOT NULL,  -- linear_regression | logistic_regression | kmeans | gnmf
    training_query VARCHAR   NOT NULL,
    target         VARCHAR,             -- NULL for unsupervised models
    features       JSON      NOT NULL,  -- [{"name", "type", "kind"}] in training (macro parameter) order
    preprocessing  JSON      NOT NULL,  -- {"impute", "standardize", "columns": [{"name", "kind", "mean", "categories", "null_category"}]}
    parameters     JSON      NOT NULL,  -- the estimator's parameters (get_params())
    model          JSON      NOT NULL,  -- coef/intercept/classes, cluster_centers or components, in original units
    metrics        JSON      NOT NULL,  -- training metrics
    strategy       VARCHAR   NOT NULL,  -- factorized | materialized
    decision       VARCHAR   NOT NULL,  -- why that strategy
    timings        JSON      NOT NULL,  -- seconds of planning, data, training
    n_rows         BIGINT    NOT NULL,
    macros         VARCHAR[] NOT NULL,  -- the SQL macros this version created
    created_at     TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (name, version)
);

-- One row per (model version, categorical feature, category): the weights a
-- one-hot column contributes, looked up by the N_predict macros (a join, not a
-- giant CASE). category NULL is the NULL category. weights[k] is per output:
-- one for linear and logistic models, one per centroid for k-means.
CREATE TABLE IF NOT EXISTS ilargi.category_weights (
    model    VARCHAR  NOT NULL,
    version  INTEGER  NOT NULL,
    feature  VARCHAR  NOT NULL,
    category VARCHAR,
    weights  DOUBLE[] NOT NULL
);

-- One row per tree model version whose trees have at most 63 leaves, read by its N_predict macros
-- (sql_functions/tree_leaf_masks.py): per (tree, feature it splits on) the leaves each code of the feature
-- leaves reachable (leaf i: bit i), and every tree's leaf values, back to back.
CREATE TABLE IF NOT EXISTS ilargi.tree_leaves (
    model       VARCHAR  NOT NULL,
    version     INTEGER  NOT NULL,
    masks       BIGINT[][] NOT NULL,
    leaf_values DOUBLE[] NOT NULL,
    PRIMARY KEY (model, version)
);

CREATE VIEW IF NOT EXISTS ilargi.current_models AS
SELECT * FROM ilargi.models
QUALIFY version = max(version) OVER (PARTITION BY name);
