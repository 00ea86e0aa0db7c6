<?php
$id = $_GET['id'];
$result = mysqli_query($conn, "SELECT * FROM users WHERE id = " . $id); // want: sql-injection
$author = $_POST['author'];
$rows = $pdo->query("SELECT * FROM posts WHERE author = '$author'"); // want: sql-injection
