@kubectl-tao.exe __complete %*
