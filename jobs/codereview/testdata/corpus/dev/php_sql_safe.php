<?php
$stmt = $pdo->prepare("SELECT * FROM users WHERE id = ?");
$stmt->execute([$_GET['id']]);
$user = $stmt->fetch();
$count = $pdo->query("SELECT COUNT(*) FROM users")->fetchColumn();
echo "Select a user: " . htmlspecialchars($user['name']);
