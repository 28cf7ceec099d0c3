module github.com/mlx5kit/mlx5kit

go 1.24
