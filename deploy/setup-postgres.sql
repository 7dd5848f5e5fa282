-- The role and the two databases on an existing PostgreSQL (the machine's or a managed one):
--   psql -h HOST -U postgres -v pw='a-long-password' -f deploy/setup-postgres.sql
-- Then put the password in JOBCAST_STORE and MLFLOW_BACKEND_STORE_URI (jobcast.env).
CREATE ROLE jobcast LOGIN PASSWORD :'pw';
CREATE DATABASE jobcast OWNER jobcast;
CREATE DATABASE mlflow OWNER jobcast;
