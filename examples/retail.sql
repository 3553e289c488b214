-- A whole ilargi_db session in SQL: run it with
--     ilargi sql retail.duckdb -f examples/retail.sql
-- (or paste it into `ilargi sql`). It builds a small normalized retail schema,
-- asks which strategy training would use, trains a model, evaluates it on
-- held-out weeks, and scores rows with the model's SQL macro.

-- The data: a fact table of sales and two dimensions, generated in SQL.
CREATE OR REPLACE TABLE stores AS
SELECT range AS store_id, 50 + (range * 37) % 400 AS floor_m2,
       ['north', 'south', 'east', 'west'][range % 4 + 1] AS region
FROM range(200);

CREATE OR REPLACE TABLE products AS
SELECT range AS product_id, 1 + (range * 13) % 90 AS price, ['food', 'home', 'toys'][range % 3 + 1] AS category
FROM range(1000);

CREATE OR REPLACE TABLE sales AS
SELECT range AS sale_id, range % 52 AS week, (range * 7919) % 200 AS store_id, (range * 104729) % 1000 AS product_id,
       (range * 31) % 5 AS promo
FROM range(200000);

-- The label: units sold, a noisy function of columns from all three tables.
CREATE OR REPLACE TABLE units AS
SELECT s.sale_id,
       (2.0 + 3.0 * s.promo + 0.01 * st.floor_m2 - 0.02 * p.price
        + CASE p.category WHEN 'toys' THEN 1.5 ELSE 0 END + ((s.sale_id * 17) % 10) / 10.0)::DOUBLE AS units
FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id);

-- Which strategy would train it, and why (nothing is trained).
SELECT ilargi_explain('linear_regression',
    'SELECT s.promo, st.floor_m2, st.region, p.price, p.category, u.units
     FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id) JOIN units u USING (sale_id)
     WHERE s.week < 40',
    'units') ->> 'strategy' AS would_use;

-- Train on weeks 0-39; the summary is JSON.
SELECT summary ->> 'version' AS version, summary ->> 'strategy' AS strategy, summary -> 'metrics' AS training_metrics
FROM (SELECT ilargi_train('units_model', 'linear_regression',
    'SELECT s.promo, st.floor_m2, st.region, p.price, p.category, u.units
     FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id) JOIN units u USING (sale_id)
     WHERE s.week < 40',
    'units', '{"alpha": 0.1}') AS summary);

-- Held-out weeks 40-51.
SELECT ilargi_evaluate('units_model',
    'SELECT s.promo, st.floor_m2, st.region, p.price, p.category, u.units
     FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id) JOIN units u USING (sale_id)
     WHERE s.week >= 40') -> 'metrics' AS held_out;

-- The model is a macro: native SQL, in parallel, usable from any DuckDB client.
SELECT st.region, p.category, round(avg(u.units), 2) AS actual,
       round(avg(units_model_predict(s.promo, st.floor_m2, st.region, p.price, p.category)), 2) AS predicted
FROM sales s JOIN stores st USING (store_id) JOIN products p USING (product_id) JOIN units u USING (sale_id)
WHERE s.week >= 40
GROUP BY ALL ORDER BY ALL;

-- The registry.
SELECT name, version, algorithm, strategy, n_rows FROM ilargi.current_models ORDER BY name;
